"""Greedy success on the held-out evaluation tasks: during training (`evaluate`) and for `gigpo eval`."""
from __future__ import annotations

import math
from typing import Optional

from gigpo.config import Config
from gigpo.progress import LINE_EVERY_S, Progress
from gigpo.seeds import eval_sampling_seed, eval_seeds
from gigpo.trainer.setup import build_generator, build_pool, build_prompt_fn, sampling


class EpisodeBar(Progress):
    """Finished episodes of one rollout phase (the `progress` callback of `rollout`): a bar on a terminal,
    in a log file a line at most every LINE_EVERY_S (a rollout of a few seconds prints none)."""

    def __init__(self, desc: str, enabled: bool) -> None:
        super().__init__(desc, unit="ep", enabled=enabled, min_interval_s=LINE_EVERY_S)


def evaluate(config: Config, pool, generator, prompt_fn, episodes: Optional[int] = None, prefix: str = "eval/",
             on_rollout=None) -> dict[str, float]:
    """Greedy (eval temperature) success on the held-out evaluation seeds, one episode per seed.
    `on_rollout` receives the episodes (the rollout record's hook)."""
    from gigpo.rollout.collect import rollout

    bar = EpisodeBar("eval", config.logging.progress)
    try:
        result = rollout(pool, generator, prompt_fn, eval_seeds(config, episodes), group_size=1,
                         settings=sampling(config, evaluation=True, seed=eval_sampling_seed(config.trainer.seed)),
                         max_prompt_tokens=config.rollout.max_prompt_tokens, progress=bar)
    finally:
        bar.close()
    if on_rollout is not None:
        on_rollout(result)
    return result.metrics(prefix)


def evaluate_checkpoint(config: Config, checkpoint: str, episodes: Optional[int] = None) -> dict[str, float]:
    """`gigpo eval`: load an HF checkpoint into the generator and report success on eval seeds."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    pool = build_pool(config, evaluation=True)
    generator = build_generator(config, checkpoint)
    try:
        metrics = evaluate(config, pool, generator, build_prompt_fn(config, tokenizer), episodes)
    finally:
        generator.close()
        pool.close()
    n = int(metrics.get("eval/episodes", 0))
    print(f"evaluation of {checkpoint} on {n} held-out episodes of {config.env.id}:")
    for key, value in sorted(metrics.items()):
        if "success" in key:
            print(f"  {key}: {value:.1%}  (standard error {math.sqrt(max(value * (1 - value), 1e-12) / max(n, 1)):.1%})")
    return metrics
