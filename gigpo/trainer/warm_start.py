"""The recipe's supervised warm-up (`trainer.sft_*`): demonstrations, cache key, and the call into warmup.py.

Kept apart from gigpo/trainer/warmup.py on purpose: that file's source is part of the warm-up cache
key, so it changes only when what the warm-up computes changes, not when the trainer around it moves.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gigpo.config import Config
from gigpo.seeds import demo_seeds, warmup_seed

# only what changes the warm-up's result: not evaluation, batch shape or worker settings
IRRELEVANT_ENV = {"workers", "step_timeout_s", "eval_episodes", "eval_seed_start", "eval_kwargs", "num_groups", "group_size"}


def warm_up(config: Config, model_path: str, pool, prompt_fn, tokenizer, warm_dir: Path) -> None:
    """Supervised warm-up on expert demonstrations into warm_dir/hf, reused from the cache when identical."""
    from gigpo.envs.demos import collect_demonstrations
    from gigpo.models.cache import default_cache_dir
    from gigpo.trainer.warmup import cached_warmup, response_ids, supervised_warmup, warmup_cache_key

    t, e = config.trainer, config.env
    seed = warmup_seed(t)

    def build(out_dir: Path) -> Path:
        tasks = demo_seeds(e, seed, t.sft_rooms)
        demos = collect_demonstrations(pool, tasks, explore=1.0 - t.sft_expert_share, seed=seed)
        prompts = prompt_fn([d.view for d in demos])
        pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompts, demos)]
        print(f"warm-up: {len(pairs)} expert-labelled states from {len(tasks)} tasks", flush=True)
        return supervised_warmup(model_path, out_dir, pairs, t.sft_steps, t.sft_lr, t.sft_batch_size, seed,
                                 config.logging.progress, dtype=config.model.dtype, action_share=t.sft_action_share)

    cached_warmup(default_cache_dir().parent / "warmups", warmup_cache_key(warmup_settings(config, model_path, seed)),
                  warm_dir, build)


def warmup_settings(config: Config, model_path: str, seed: int) -> dict[str, Any]:
    """What a warm-up's result depends on besides code: its cache key's input. `seed` is the seed in use, not
    trainer.seed (a shared warm-up has one cache entry); `matmuls` keeps a warm-up built with widened bf16
    matmuls (an AVX2-only CPU) apart from one built with native kernels, in a cache that outlives the machine."""
    from gigpo.cpu_bf16 import matmul_path

    t, e = config.trainer, config.env
    return {"model": model_path, "dtype": config.model.dtype, "matmuls": matmul_path(config.model.dtype),
            "env": e.model_dump(mode="json", exclude=IRRELEVANT_ENV),
            "sft": {k: v for k, v in t.model_dump(mode="json").items() if k.startswith("sft_") and k != "sft_seed"},
            "seed": seed}
