"""Greedy success on the held-out evaluation tasks: during training (`evaluate`) and for `gigpo eval`."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from gigpo.config import Config
from gigpo.infra.progress import LINE_EVERY_S, Progress
from gigpo.infra.seeds import eval_sampling_seed, eval_seeds
from gigpo.trainer.setup import build_generator, build_pool, build_prompt_fn, sampling

if TYPE_CHECKING:
    from gigpo.rollout.records import Rollout
    from gigpo.trainer.sharding import Share


class EpisodeBar(Progress):
    """Finished episodes of one rollout phase (the `progress` callback of `rollout`): a bar on a terminal,
    in a log file a line at most every LINE_EVERY_S (a rollout of a few seconds prints none)."""

    def __init__(self, desc: str, enabled: bool) -> None:
        super().__init__(desc, unit="ep", enabled=enabled, min_interval_s=LINE_EVERY_S)


def evaluate(config: Config, pool, generator, prompt_fn, episodes: Optional[int] = None, prefix: str = "eval/",
             on_rollout=None) -> dict[str, float]:
    """Greedy (eval temperature) success on the held-out evaluation seeds, one episode per seed.
    `on_rollout` receives the episodes (the rollout record's hook)."""
    result = play_evaluation(config, pool, generator, prompt_fn, episodes)
    if on_rollout is not None:
        on_rollout(result)
    return result.metrics(prefix)


def play_evaluation(config: Config, pool, generator, prompt_fn, episodes: Optional[int] = None,
                    share: Optional["Share"] = None) -> "Rollout":
    """The evaluation rollout: one episode per held-out seed, or `share`'s contiguous part of them with the
    ids they have in the whole evaluation (the training loop splits evaluation over ranks as it splits
    rollouts, and merges the parts: gigpo.trainer.sharding)."""
    from gigpo.infra.seeds import rank_sampling_seed
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.sharding import Share

    share = share or Share()
    seeds = eval_seeds(config, episodes)
    mine = share.of(len(seeds))
    if not mine:  # fewer evaluation tasks than playing ranks: this rank plays none
        from gigpo.advantage.rows import StepRows
        from gigpo.rollout.records import Rollout

        return Rollout(steps=StepRows.empty(), episodes=[])
    seed = rank_sampling_seed(eval_sampling_seed(config.trainer.seed), share.rank, per_request=generator.turns == "async")
    bar = EpisodeBar("eval", config.logging.progress and share.rank == 0)
    try:
        return rollout(pool, generator, prompt_fn, seeds[mine.start:mine.stop], group_size=1,
                       settings=sampling(config, evaluation=True, seed=seed),
                       max_prompt_tokens=config.rollout.max_prompt_tokens, group_offset=mine.start, progress=bar)
    finally:
        bar.close()


def evaluate_checkpoint(config: Config, checkpoint: str, episodes: Optional[int] = None) -> dict[str, float]:
    """`gigpo eval`: load an HF checkpoint into the generator and report success on eval seeds."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    pool = build_pool(config, evaluation=True)
    generator = build_generator(config, checkpoint)
    try:
        result = play_evaluation(config, pool, generator, build_prompt_fn(config, tokenizer), episodes)
    finally:
        generator.close()
        pool.close()
    metrics = result.metrics("eval/")
    counts = episode_counts(result, "eval/")
    print(f"evaluation of {checkpoint} on {counts['eval/success']} held-out episodes of {config.env.id}:")
    for key, value in sorted(metrics.items()):
        if key in counts:
            n = counts[key]
            print(f"  {key}: {value:.1%} of {n}  (standard error {binomial_standard_error(value, n):.1%})")
    return metrics


def evaluate_start(config: Config, episodes: Optional[int] = None) -> dict[str, float]:
    """`gigpo eval RECIPE` without --checkpoint: the policy every run of the recipe starts from, built as a run
    builds it (its warm-up artifact checked against the digest and merged, or the model itself when there is no
    warm-up), so that anyone can check a recipe's recorded start on their own machine."""
    import tempfile
    from pathlib import Path

    from gigpo.config import RecipeError
    from gigpo.models.resolve import resolve_model_path
    from gigpo.trainer.warmup_artifact import install_artifact

    t, m = config.trainer, config.model
    model_path = resolve_model_path(m.path, m.init, m.corpus, m.seed)
    if t.sft_artifact:
        with tempfile.TemporaryDirectory(prefix="gigpo-start-") as tmp:
            start = install_artifact(t.sft_artifact, t.sft_artifact_sha256, Path(tmp), model_path)
            return evaluate_checkpoint(config, str(start), episodes)
    if t.sft_steps > 0:
        raise RecipeError(f"the recipe warms up for trainer.sft_steps={t.sft_steps} in each run and names no saved "
                          "warm-up (trainer.sft_artifact), so its start exists only inside a run: pass --checkpoint "
                          "RUN/warmup/hf, or save the warm-up with `gigpo warmup RECIPE --out DIR` and name it")
    return evaluate_checkpoint(config, model_path, episodes)


def episode_counts(result: "Rollout", prefix: str) -> dict[str, int]:
    """How many episodes each success rate of `result.metrics(prefix)` averages: all, or one task type's."""
    counts = {f"{prefix}success": len(result.episodes)}
    for episode in result.episodes:
        if episode.task_type:
            key = f"{prefix}success/{episode.task_type}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def binomial_standard_error(rate: float, n: int) -> float:
    """The standard error of a success rate over n episodes (0 at 0% and 100%, as the binomial's is)."""
    return math.sqrt(rate * (1 - rate) / n) if n > 0 else float("nan")
