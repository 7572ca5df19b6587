"""The recipe's supervised warm-up (`trainer.sft_*`): demonstrations, cache key, and the call into sft_warmup.py.

Kept apart from gigpo/trainer/sft_warmup.py on purpose: that file's source is part of the warm-up cache
key, so it changes only when what the warm-up computes changes, not when the trainer around it moves.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gigpo.config import Config, RecipeError
from gigpo.infra.seeds import demo_seeds, sft_warmup_seed

# only what changes the warm-up's result: not evaluation, batch shape or worker settings
IRRELEVANT_ENV = {"workers", "step_timeout_s", "eval_episodes", "eval_seed_start", "eval_kwargs", "num_groups", "group_size"}


def sft_warm_start(config: Config, model_path: str, pool, prompt_fn, tokenizer, warm_dir: Path) -> None:
    """Supervised warm-up on expert demonstrations into warm_dir/hf, reused from the cache when identical."""
    from gigpo.envs.demos import NoExpertError, collect_demonstrations
    from gigpo.models.cache import default_cache_dir
    from gigpo.trainer.sft_warmup import cached_warmup, response_ids, supervised_warmup, warmup_cache_key

    t, e = config.trainer, config.env
    seed = sft_warmup_seed(t)
    cache_root = default_cache_dir().parent / "warmups"

    def build(out_dir: Path) -> Path:
        check_before_sft_warmup(config, cache_root)
        tasks = demo_seeds(e, seed, t.sft_rooms)
        try:
            demos = collect_demonstrations(pool, tasks, explore=1.0 - t.sft_expert_share, seed=seed,
                                           fix=expert_fix(config))
        except NoExpertError as exc:
            raise RecipeError(str(exc)) from None
        prompts = prompt_fn([d.view for d in demos])
        pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompts, demos)]
        check_answers_fit(pairs, config.rollout.max_new_tokens)
        print(f"warm-up: {len(pairs)} expert-labelled states from {len(tasks)} tasks", flush=True)
        return supervised_warmup(model_path, out_dir, pairs, t.sft_steps, t.sft_lr, t.sft_batch_size, seed,
                                 config.logging.progress, dtype=config.model.dtype, action_share=t.sft_action_share,
                                 micro_tokens=t.sft_micro_tokens, lora_rank=t.sft_lora_rank)

    cached_warmup(cache_root, warmup_cache_key(sft_warmup_settings(config, model_path, seed)),
                  warm_dir, build)


def check_answers_fit(pairs: list[tuple[list[int], list[int]]], max_new_tokens: int) -> None:
    """RecipeError when an expert answer is longer than the rollout may write: the warm-up would teach answers
    that generation always cuts (and the env refuses), so RL would start from a policy that cannot act."""
    lengths = [len(answer) for _, answer in pairs]
    too_long = sum(n > max_new_tokens for n in lengths)
    if too_long:
        raise RecipeError(f"{too_long} of the {len(pairs)} expert answers are longer than rollout.max_new_tokens="
                          f"{max_new_tokens} (the longest is {max(lengths)} tokens with this tokenizer, end of turn "
                          f"included): the policy could never finish them; set rollout.max_new_tokens: {max(lengths)} "
                          "or more")


def expert_fix(config: Config) -> str:
    """How to give the recipe's env an expert: the error of a warm-up on an env without one ends with this."""
    from gymnasium.envs.registration import load_env_creator

    from gigpo.envs.registry import env_spec

    e, t = config.env, config.trainer
    spec = env_spec(e.id)
    creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
    kwarg = getattr(creator, "expert_kwarg", None)
    without = "or set trainer.sft_steps: 0 to train without the supervised warm-up"
    if kwarg and not e.kwargs.get(kwarg):
        return f"its expert is off: set env.kwargs.{kwarg}: true, {without}"
    return (f"the supervised warm-up (trainer.sft_steps={t.sft_steps}) learns from the env's expert_action(), "
            f"which gives none here: use an env with an expert, {without}")


def check_before_sft_warmup(config: Config, cache_root: Path) -> None:
    """Settings that would otherwise fail only after the warm-up (minutes to hours): the evaluation env
    (env.eval_kwargs, first made for the evaluation after it) and the warm-up cache (written after it)."""
    import os

    from gigpo.envs.pool import EnvPool

    e = config.env
    if e.eval_kwargs:
        kwargs = {"invalid_action_penalty": e.invalid_action_penalty, **e.kwargs, **e.eval_kwargs}
        with EnvPool(e.id, env_kwargs=kwargs, max_steps=e.max_steps, workers=1, step_timeout_s=e.step_timeout_s) as pool:
            try:
                pool.check_make()
            except ValueError as exc:
                raise RecipeError(f"env.eval_kwargs={e.eval_kwargs}: {exc}; the evaluation after the warm-up "
                                  "would fail with it") from None
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
        writable = os.access(cache_root, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        raise RecipeError(f"the warm-up cache {cache_root} is not writable, so the warm-up would fail once built: "
                          "point $GIGPO_CACHE at a writable folder")


def sft_warmup_settings(config: Config, model_path: str, seed: int) -> dict[str, Any]:
    """What a warm-up's result depends on besides code: its cache key's input. `seed` is the seed in use, not
    trainer.seed (a shared warm-up has one cache entry); `matmuls` keeps a warm-up built with widened bf16
    matmuls (an AVX2-only CPU) apart from one built with native kernels, in a cache that outlives the machine."""
    from gigpo.infra.cpu_bf16 import matmul_path

    t, e = config.trainer, config.env
    return {"model": model_path, "dtype": config.model.dtype, "matmuls": matmul_path(config.model.dtype),
            "env": e.model_dump(mode="json", exclude=IRRELEVANT_ENV),
            "sft": {k: v for k, v in t.model_dump(mode="json").items() if k.startswith("sft_") and k != "sft_seed"},
            "seed": seed}
