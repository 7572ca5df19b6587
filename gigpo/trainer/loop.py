"""The training loop, top to bottom: rollout -> advantage -> log-probs -> update -> weight sync -> log.

    gigpo train recipes/sokoban_tiny.yaml trainer.iterations=2
    gigpo train recipes/alfworld_7b.yaml --resume

One controller drives everything. With `trainer.nprocs > 1` every DeepSpeed rank runs this same
function; rank 0 alone owns the environment pool, the generator and the logs, and broadcasts each
iteration's training samples to the other ranks, which join the forward/backward passes and the
checkpoint. Seeds of iteration i depend only on (trainer.seed, i), so a resumed run replays exactly
the iterations a crash interrupted.
"""
from __future__ import annotations

import json
import math
import random
import resource
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from gigpo.config import Config, dump_config
from gigpo.trainer.nonfinite import NonFiniteError, require_finite


GAP_PROBE = 32
"""Samples whose log-probs the trainer recomputes each iteration when the old ones come from the generator."""

TrainingAborted = NonFiniteError
"""Training stopped on corrupted state (NaN/inf); nothing corrupt was saved (the name `gigpo train` catches)."""


# --------------------------------------------------------------------------- seeds and guards

def train_seeds(config: Config, iteration: int, draw: int = 0) -> list[int]:
    """Task seeds of an iteration's B groups (draw > 0: dynamic sampling's re-draws); disjoint per run seed."""
    b = config.env.num_groups
    base = config.env.train_seed_start + config.trainer.seed * 10_000_000 + ((iteration - 1) * (config.algorithm.max_resample + 1) + draw) * b
    return list(range(base, base + b))


def eval_seeds(config: Config, episodes: Optional[int] = None) -> list[int]:
    n = episodes or config.env.eval_episodes
    return list(range(config.env.eval_seed_start, config.env.eval_seed_start + n))


def check_finite(name: str, values: Any, iteration: int, phase: str) -> None:
    require_finite(name, values, f"iteration {iteration}, phase {phase}")


def placebo_advantages(advantage: np.ndarray, seed: int, iteration: int) -> np.ndarray:
    """`algorithm.shuffle_advantages`: the same values in an order drawn from (seed, iteration) alone."""
    return np.random.default_rng([seed, iteration]).permutation(advantage)


def peak_rss_gb() -> float:
    """Peak resident memory of this process and its finished children (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 2**20


# --------------------------------------------------------------------------- building blocks

def build_generator(config: Config, model_path: str):
    from gigpo.rollout.factory import generator_from_config

    return generator_from_config(config.rollout, model_path, config.model.dtype, config.trainer.seed)


def build_pool(config: Config, evaluation: bool = False):
    """The env pool for training episodes, or for evaluation ones (with `env.eval_kwargs` merged in)."""
    from gigpo.envs.pool import EnvPool

    e = config.env
    kwargs = {"invalid_action_penalty": e.invalid_action_penalty, **e.kwargs, **(e.eval_kwargs if evaluation else {})}
    return EnvPool(e.id, env_kwargs=kwargs, max_steps=e.max_steps, workers=e.workers, step_timeout_s=e.step_timeout_s)


def build_prompt_fn(config: Config, tokenizer):
    """Episode views -> prompt token ids, batched through the tokenizer's chat template."""
    from gigpo.envs.prompt import PromptBuilder

    builder = PromptBuilder(tokenizer, config.env.max_steps, config.env.history_length, config.env.prompt_template,
                            system=config.env.system_prompt, chat_template=config.model.chat_template)
    return builder.batch_token_ids


def sampling(config: Config, evaluation: bool, seed: Optional[int]):
    from gigpo.rollout.types import SamplingSettings

    r = config.rollout
    return SamplingSettings(temperature=r.eval_temperature if evaluation else r.temperature,
                            top_p=1.0 if evaluation else r.top_p, max_new_tokens=r.max_new_tokens,
                            stop=tuple(r.stop), seed=seed)


def step_rows(steps, values: Optional[Sequence[float]] = None, mixed_versions: bool = False):
    """The advantage module's rows for a rollout's steps (anchors hashed once, here, with the policy version
    unless mixed_versions: gigpo.trainer.pipeline.grouping_anchors)."""
    from gigpo.advantage.anchors import anchor_keys
    from gigpo.advantage.rows import StepRows
    from gigpo.trainer.pipeline import grouping_anchors

    texts = [s.anchor for s in steps]
    return StepRows(group=np.array([s.group for s in steps]), traj=np.array([s.traj for s in steps]),
                    step=np.array([s.step for s in steps]), reward=np.array([s.reward for s in steps]),
                    anchor=anchor_keys(grouping_anchors(steps, mixed_versions)), value=None if values is None else np.asarray(values), anchor_text=texts)


def old_logprobs_from_generator(config: Config) -> bool:
    """Whether the generator's log-probs serve as the PPO ratio's old ones (trainer.old_logprobs).

    `auto` takes them only where they are the actor's own up to float rounding: the hf backend holds
    the actor's weights in the same dtype, and at temperature 1 both score the same distribution.
    """
    choice = config.trainer.old_logprobs
    if config.rollout.mode == "async":  # the generator's are a stale policy's: the behaviour log-probs
        return False
    if choice != "auto":
        return choice == "generator"
    return config.rollout.backend == "hf" and config.model.dtype == "fp32" and config.rollout.temperature == 1.0


def logprob_gap(generator_logps: Sequence[Sequence[float]], trainer_logps: Sequence[Any]) -> dict[str, float]:
    """How far the generator's log-probs are from the trainer's, per response token (mean and max |diff|)."""
    diffs = np.concatenate([np.abs(np.asarray(g, dtype=np.float64) - t.double().numpy())
                            for g, t in zip(generator_logps, trainer_logps)])
    return {"rollout/logp_gap_mean": float(diffs.mean()), "rollout/logp_gap_max": float(diffs.max())}


def informative_group_ids(steps) -> set[int]:
    """Groups whose trajectory returns are not all equal (the ones that carry a learning signal)."""
    from gigpo.advantage.sampling import informative_groups

    if not steps:
        return set()
    mask = informative_groups(step_rows(steps))
    return {s.group for s, keep in zip(steps, mask) if keep}


class EpisodeBar:
    """A tqdm bar of finished episodes for one rollout phase (the `progress` callback of `rollout`)."""

    def __init__(self, desc: str, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(desc=desc, unit="ep", leave=False, disable=not enabled, dynamic_ncols=True)

    def __call__(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def evaluate(config: Config, pool, generator, prompt_fn, episodes: Optional[int] = None, prefix: str = "eval/",
             on_rollout=None) -> dict[str, float]:
    """Greedy (eval temperature) success on the held-out evaluation seeds, one episode per seed.
    `on_rollout` receives the episodes (the rollout record's hook)."""
    from gigpo.rollout.collect import rollout

    bar = EpisodeBar("eval", config.logging.progress)
    try:
        result = rollout(pool, generator, prompt_fn, eval_seeds(config, episodes), group_size=1,
                         settings=sampling(config, evaluation=True, seed=config.trainer.seed),
                         max_prompt_tokens=config.rollout.max_prompt_tokens, progress=bar)
    finally:
        bar.close()
    if on_rollout is not None:
        on_rollout(result)
    return result.metrics(prefix)


def warm_up(config: Config, model_path: str, pool, prompt_fn, tokenizer, warm_dir: Path) -> None:
    """Supervised warm-up on expert demonstrations into warm_dir/hf, reused from the cache when identical."""
    from gigpo.envs.demos import collect_demonstrations
    from gigpo.models.cache import default_cache_dir
    from gigpo.trainer.warmup import cached_warmup, response_ids, supervised_warmup, warmup_cache_key

    t, e = config.trainer, config.env
    seed = t.seed if t.sft_seed is None else t.sft_seed  # sft_seed: one warm-up shared by every RL seed

    def build(out_dir: Path) -> Path:
        demo_seeds = [e.train_seed_start + 5_000_000_000 + seed * 100_000 + i for i in range(t.sft_rooms)]
        demos = collect_demonstrations(pool, demo_seeds, explore=1.0 - t.sft_expert_share, seed=seed)
        prompts = prompt_fn([d.view for d in demos])
        pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompts, demos)]
        print(f"warm-up: {len(pairs)} expert-labelled states from {len(demo_seeds)} tasks", flush=True)
        return supervised_warmup(model_path, out_dir, pairs, t.sft_steps, t.sft_lr, t.sft_batch_size, seed,
                                 config.logging.progress, dtype=config.model.dtype)

    # only what changes the warm-up's result: not evaluation, batch shape or worker settings
    irrelevant = {"workers", "step_timeout_s", "eval_episodes", "eval_seed_start", "eval_kwargs", "num_groups", "group_size"}
    settings = {"model": model_path, "dtype": config.model.dtype, "env": e.model_dump(mode="json", exclude=irrelevant),
                "sft": {k: v for k, v in t.model_dump(mode="json").items() if k.startswith("sft_") and k != "sft_seed"},
                "seed": seed}  # the seed in use, not trainer.seed: a shared warm-up has one cache entry
    cached_warmup(default_cache_dir().parent / "warmups", warmup_cache_key(settings), warm_dir, build)


def build_verifier(config: Config, generator, vocab_size: int, world_size: int):
    """The probe that checks every sync (rollout.verify_sync); needs the full model on rank 0."""
    from gigpo.rollout.verify import SyncVerifier, default_tolerance

    if not config.rollout.verify_sync or generator is None:
        return None
    if config.trainer.zero_stage == 3 and world_size > 1:
        print("gigpo: rollout.verify_sync is skipped under ZeRO-3 with several ranks (the probe forward would "
              "need every rank)", flush=True)
        return None
    return SyncVerifier(generator, vocab_size, *default_tolerance(config.model.dtype))


def sync_weights(actor, generator, version: int, verifier=None) -> dict[str, float]:
    """Push the actor's weights into the generator; every rank iterates (ZeRO-3 gathers are collective).
    Returns the verification probe's largest log-prob gap as a metric when a verifier is given."""
    weights = actor.named_weights()
    if generator is None:
        for _ in weights:
            pass
        return {}
    generator.update_weights(weights, version=version)
    if verifier is None:
        return {}
    return {"rollout/sync_gap_max": verifier.check(actor.hf_module())}


# --------------------------------------------------------------------------- the loop

def train(config: Config, resume: bool = False) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from gigpo.advantage.diagnostics import revisit_diagnostics, step_group_diagnostics
    from gigpo.advantage.estimators import compute_advantages
    from gigpo.models.resolve import resolve_model_path
    from gigpo.rollout.collect import rollout
    import torch

    from gigpo.trainer.action_tokens import action_token_mask
    from gigpo.trainer.batching import TrainSample, check_token_budget
    from gigpo.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from gigpo.trainer.distributed import barrier, broadcast_object, init_distributed, shutdown_distributed
    from gigpo.trainer.engines import ActorEngine, CriticEngine, ReferenceModel, settings_from_config
    from gigpo.trainer.lora import AdapterFreeReference
    from gigpo.trainer.metrics import MetricsLogger, PhaseTimer
    from gigpo.viewer.records import RolloutRecorder

    t, a, e = config.trainer, config.algorithm, config.env
    # fail on a bad recipe before any model, process or environment is started
    check_token_budget(config.rollout.max_prompt_tokens, config.rollout.max_new_tokens, t.micro_token_budget)
    rank = init_distributed()
    main = rank.is_main
    run_dir = Path(t.run_dir)
    random.seed(t.seed)
    np.random.seed(t.seed)
    recorder = RolloutRecorder.from_config(config, run_dir)  # rollout records for `gigpo view`

    # ---- model, optional supervised warm-up (rank 0, before the engines exist)
    model_path = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed) if main else None
    model_path = broadcast_object(model_path)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None and main:
        print(f"gigpo: --resume found no checkpoint in {run_dir / 'checkpoints'}; starting from the beginning", flush=True)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(config))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pool = build_pool(config) if main else None
    eval_pool = (build_pool(config, evaluation=True) if config.env.eval_kwargs else pool) if main else None
    prompt_fn = build_prompt_fn(config, tokenizer) if main else None
    warm_dir = run_dir / "warmup"
    if t.sft_steps > 0:
        if main and not (warm_dir / "hf" / "config.json").is_file():
            warm_up(config, model_path, pool, prompt_fn, tokenizer, warm_dir)
        barrier()
        model_path = str(warm_dir / "hf")

    # ---- engines: actor (trained), reference (frozen, for KL), critic (PPO only)
    engine_settings, loss_settings = settings_from_config(config)
    actor = ActorEngine(model_path, engine_settings, loss_settings)
    reference = None
    if a.kl_coef > 0:  # with LoRA the reference is the actor with its adapters off: no second model
        reference = AdapterFreeReference(actor) if engine_settings.lora else ReferenceModel(model_path, engine_settings)
    critic = None
    if a.estimator == "ppo":
        critic_settings, critic_loss = settings_from_config(config, critic=True)
        critic = CriticEngine(model_path, critic_settings, critic_loss)

    state: dict[str, Any] = {"iteration": 0, "env_steps_total": 0}
    if checkpoint is not None:
        restored = load_checkpoint(checkpoint, actor, critic)
        state = {**state, **restored.loop_state, "iteration": restored.iteration}
    start = state["iteration"] + 1

    generator = build_generator(config, model_path) if main else None
    from_generator = old_logprobs_from_generator(config)
    verifier = build_verifier(config, generator, actor.hf_module().config.vocab_size, rank.world_size)
    logger = None
    if main:
        logger = MetricsLogger(run_dir, config.logging.wandb_mode, config.logging.wandb_project,
                               config.model_dump(mode="json"), run_dir.name)
        logger.truncate_after(state["iteration"])
        print(f"gigpo: training {a.estimator} on {e.id} with {model_path}: iterations {start}..{t.iterations}, "
              f"{e.num_groups} groups x {e.group_size}, run dir {run_dir}", flush=True)
    if checkpoint is not None:
        sync_weights(actor, generator, version=state["iteration"], verifier=verifier)
    if main and start == 1 and not (run_dir / "metrics.jsonl").exists():
        # iteration 0: the starting policy (after warm-up, if any), so curves have a baseline
        logger.log(0, {**evaluate(config, eval_pool, generator, prompt_fn, on_rollout=recorder.eval_hook(0)),
                       "rollout/env_steps_total": 0})

    def play(iteration: int) -> tuple[list, list, dict[str, float]]:
        """Iteration `iteration`'s rollout (rank 0): B groups x N episodes, re-drawing uninformative groups if
        asked. Runs where the pipeline says: here (rollout.mode=sync) or on its producer thread (async)."""
        metrics: dict[str, float] = {}
        settings = sampling(config, evaluation=False, seed=t.seed * 100_003 + iteration)
        bar = EpisodeBar(f"iter {iteration} rollout", config.logging.progress)
        batch = rollout(pool, pipeline.generator, prompt_fn, train_seeds(config, iteration), e.group_size, settings,
                        config.rollout.max_prompt_tokens, progress=bar)
        bar.close()
        steps, episodes = batch.steps, batch.episodes
        metrics.update(batch.metrics())
        metrics.update(batch.env_faults)
        metrics.update(pool.stats().as_metrics())
        check_finite("rewards", [s.reward for s in steps], iteration, "rollout")
        if a.dynamic_sampling:
            keep = informative_group_ids(steps)
            for draw in range(1, a.max_resample + 1):
                if len(keep) >= e.num_groups:
                    break
                extra = rollout(pool, pipeline.generator, prompt_fn, train_seeds(config, iteration, draw), e.group_size,
                                settings, config.rollout.max_prompt_tokens, group_offset=draw * e.num_groups)
                check_finite("rewards", [s.reward for s in extra.steps], iteration, f"re-draw {draw}")
                steps, episodes = steps + extra.steps, episodes + extra.episodes
                keep |= informative_group_ids(extra.steps)
                metrics["rollout/draws"] = float(draw + 1)
            kept = sorted(keep)[: e.num_groups]
            metrics["rollout/kept_groups"] = float(len(kept))
            metrics["rollout/env_steps"] = float(len(steps))  # every step played counts toward the budget
            steps = [s for s in steps if s.group in set(kept)]
            metrics["rollout/trained_steps"] = float(len(steps))
            if not steps:
                print(f"gigpo: iteration {iteration}: no group with differing returns after "
                      f"{int(metrics.get('rollout/draws', 1))} draw(s); skipping the update "
                      f"(raise algorithm.max_resample or make the start stronger)", flush=True)
        metrics["time/generate"] = batch.seconds_generate
        metrics["time/env"] = batch.seconds_env
        return steps, episodes, metrics

    # ---- issue 27 hook: the rollout pipeline (gigpo.trainer.pipeline) plays rollouts, syncs weights and runs
    # evaluations; in async mode on a thread of its own, overlapping the next rollout with this update
    from gigpo.trainer.pipeline import RolloutPipeline

    r = config.rollout
    pipeline = RolloutPipeline(play if main else None, generator, r.mode, r.max_staleness, version=state["iteration"],
                               last_iteration=t.iterations, importance_cap=r.importance_cap,
                               mixed_versions=r.group_versions == "mixed")
    try:
        for iteration in range(start, t.iterations + 1):
            timer = PhaseTimer()
            metrics: dict[str, float] = {}
            iteration_start = time.perf_counter()

            # ---- rollout (rank 0): B groups x N episodes, re-drawing uninformative groups if asked
            steps = None
            if main:
                with timer("rollout"):
                    steps, episodes, rollout_metrics = pipeline.collect(iteration)  # issue 27 hook: the rollout
                    metrics.update(rollout_metrics)
                    state["env_steps_total"] += int(metrics["rollout/env_steps"])
                    metrics["rollout/env_steps_total"] = float(state["env_steps_total"])

            steps = broadcast_object(steps if main else None)
            state["env_steps_total"] = broadcast_object(state["env_steps_total"])  # every rank sees the budget
            last = iteration == t.iterations or bool(t.max_env_steps and state["env_steps_total"] >= t.max_env_steps)

            # dynamic sampling can drop every group; such an iteration only plays, evaluates and saves
            if steps:
                # ---- advantages on the real rows only (no padding, no duplicates); every rank computes the
                # same pure function, so only the rollout crosses processes
                with timer("advantage"):
                    values = token_values = None
                    if critic is not None:  # V(s_t): the critic's value where the response starts
                        token_values = critic.compute_values([TrainSample(s.prompt_ids, s.response_ids) for s in steps])
                        values = [float(v[0]) for v in token_values]
                    rows = step_rows(steps, values, mixed_versions=config.rollout.group_versions == "mixed")
                    result = compute_advantages(a.estimator, rows, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight,
                                                norm=a.norm, episode_stats=a.episode_stats, similarity=a.similarity,
                                                step_min_spread=a.step_min_spread)
                    check_finite("advantages", result.advantage, iteration, "advantage")
                    advantage = result.advantage
                    if a.shuffle_advantages:
                        advantage = placebo_advantages(advantage, t.seed, iteration)
                    if main:
                        metrics.update(step_group_diagnostics(result))
                        metrics.update(revisit_diagnostics(rows))
                        recorder.after_advantage(iteration, last, steps, episodes, rows, result)
                        if config.logging.log_rollouts:
                            from gigpo.advantage.jsonl import write_step_rows

                            write_step_rows(run_dir / "rollouts" / f"{iteration:06d}.jsonl", rows)
                samples_payload = [(s.prompt_ids, s.response_ids, float(adv), float(ret))
                                   for s, adv, ret in zip(steps, advantage, result.returns)]
                samples = [TrainSample(p, r, advantage=adv, action_mask=torch.tensor(action_token_mask(tokenizer, r)))
                           for p, r, adv, _ in samples_payload]
                # ---- log-probs: old (the generator's where exact, else the actor's before the update) and
                # reference (for KL)
                with timer("logprobs"):
                    if from_generator:
                        for sample, step in zip(samples, steps):
                            sample.logp_old = torch.tensor(step.response_logprobs, dtype=torch.float32)
                        # the gap is still logged, on a cheap sample, so a generator/trainer mismatch shows
                        probe = random.Random(t.seed * 7_919 + iteration).sample(range(len(samples)), min(GAP_PROBE, len(samples)))
                        probe_logps = actor.compute_log_probs([samples[i] for i in probe])
                        if main:
                            metrics.update(logprob_gap([steps[i].response_logprobs for i in probe], probe_logps))
                    else:
                        old = actor.compute_log_probs(samples)
                        for sample, logp in zip(samples, old):
                            sample.logp_old = logp
                        if main:
                            metrics.update(logprob_gap([s.response_logprobs for s in steps], old))
                    metrics.update(pipeline.correct(samples, steps))  # issue 27 hook: async's importance weights
                    if reference is not None:
                        for sample, logp in zip(samples, reference.compute_log_probs(samples)):
                            sample.logp_ref = logp
                    if critic is not None:
                        for sample, value, (_, _, _, ret) in zip(samples, token_values, samples_payload):
                            sample.values_old = value
                            sample.returns = torch.full_like(value, ret)

                # ---- PPO-clip update (and the critic's)
                with timer("update"):
                    update_metrics = actor.update(samples)
                    if critic is not None:
                        update_metrics.update(critic.update(samples))
                    losses = [v for k, v in update_metrics.items() if k.startswith("loss/")]
                    check_finite("loss", losses, iteration, "update")
                    metrics.update(update_metrics)

                # ---- weight sync into the generator
                with timer("sync"):
                    # issue 27 hook: async mode queues the weights for the producer, between two rollouts
                    metrics.update(pipeline.sync(actor.named_weights(), iteration) if pipeline.is_async
                                   else sync_weights(actor, generator, version=iteration, verifier=verifier))

            if main and (iteration % t.eval_every == 0 or last):  # the final policy is always evaluated
                with timer("eval"):
                    metrics.update(pipeline.call(lambda: evaluate(config, eval_pool, generator, prompt_fn,
                                                                  on_rollout=recorder.eval_hook(iteration))))
            metrics.update(timer.metrics())
            metrics["time/iteration"] = time.perf_counter() - iteration_start
            metrics["perf/peak_rss_gb"] = peak_rss_gb()

            # ---- checkpoint (collective), then the metrics line that says the iteration is done
            state["iteration"] = iteration
            if iteration % t.save_every == 0 or last:
                save_checkpoint(run_dir, iteration, actor, tokenizer, critic, loop_state=state, keep_last=t.keep_last)
            if main:
                logger.log(iteration, metrics)
                print(logger.summary_line(iteration, t.iterations, metrics), flush=True)
            if last:
                if main and iteration < t.iterations:
                    print(f"gigpo: reached trainer.max_env_steps={t.max_env_steps}; stopping", flush=True)
                break
        summary = finish(run_dir, state) if main else {}
    finally:
        pipeline.close()  # joins the async producer thread before what it uses closes
        if generator is not None:
            generator.close()
        for env_pool in {id(p): p for p in (pool, eval_pool) if p is not None}.values():
            env_pool.close()
        if logger is not None:
            logger.close()
        shutdown_distributed()
    return summary


def finish(run_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """Curves, a final summary on the console, and `done.json` (what `gigpo compare` looks for)."""
    from gigpo.plots import plot_run
    from gigpo.trainer.metrics import read_metrics

    records = read_metrics(run_dir)
    plot_run(records, run_dir / "curves.png")
    evals = [r for r in records if "eval/success" in r]
    summary = {"iterations": state["iteration"], "env_steps_total": state["env_steps_total"],
               "start_eval_success": evals[0]["eval/success"] if evals else None,
               "final_eval_success": evals[-1]["eval/success"] if evals else None,
               "best_eval_success": max(r["eval/success"] for r in evals) if evals else None,
               "curves": str(run_dir / "curves.png"), "metrics": str(run_dir / "metrics.jsonl")}
    (run_dir / "done.json").write_text(json.dumps(summary, indent=1))
    print("\n== gigpo summary ==")
    for key, value in summary.items():
        shown = f"{value:.1%}" if isinstance(value, float) and "success" in key else value
        print(f"  {key}: {shown}")
    return summary


def launch_or_train(config: Config, recipe: str, overrides: Sequence[str], resume: bool) -> int:
    """`gigpo train`: relaunch through DeepSpeed's launcher for several ranks, else train here."""
    import sys

    from gigpo.trainer.distributed import relaunch_if_needed

    code = relaunch_if_needed(sys.argv[1:], config.trainer.nprocs)
    if code is not None:
        return code
    train(config, resume=resume)
    return 0


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
