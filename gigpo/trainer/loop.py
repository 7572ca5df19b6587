"""The training loop, top to bottom: rollout -> advantage -> log-probs -> update -> weight sync -> log.

    gigpo train recipes/sokoban_tiny.yaml trainer.iterations=2
    gigpo train recipes/alfworld_7b.yaml --resume

One controller drives everything. With `trainer.nprocs > 1` every DeepSpeed rank runs this same
function. With an in-process generator (hf, vllm) every rank plays its own share of the iteration's
task groups with its own generator and env pool (sharding.py), computes the advantages of its own groups
(every estimator is group-local) and trains on its own samples: only gradients, metrics and the scalars
the loss needs (its denominators) cross ranks. Rank 0 alone keeps the logs, from the ranks' metrics (and,
for `gigpo view`'s records when one is due, every rank's step records). Where an engine spans several ranks
(rollout.tensor_parallel_size), its ranks play the same share in step and each trains on its part of the
rows. Where rank 0 alone plays (a remote server), it hands each rank a share of its groups to train on. Seeds of iteration i depend only on
(trainer.seed, i) (gigpo/infra/seeds.py), so a resumed run replays exactly the iterations a crash interrupted.
What exists before the first iteration is built in setup.py; evaluation is evaluation.py; one
iteration's steps travel as one StepRows (gigpo/advantage/rows.py), from the rollout to the samples
the engines take (samples.py).
"""
from __future__ import annotations

import json
import random
import resource
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from gigpo.config import Config
from gigpo.infra.seeds import probe_seed, rank_sampling_seed, rollout_sampling_seed, train_seeds
from gigpo.trainer.nonfinite import require_finite, stop_on_nonfinite_rows
from gigpo.trainer.pipeline import RolloutPipeline
from gigpo.trainer.rollout_correction import correction_from_config
from gigpo.trainer.setup import Run

if TYPE_CHECKING:
    from gigpo.advantage.rows import StepRows
    from gigpo.rollout.records import Rollout
    from gigpo.rollout.types import SamplingSettings

GAP_PROBE = 32
"""Samples whose log-probs the trainer recomputes each iteration when the old ones come from the generator."""


def train(config: Config, resume: bool = False) -> dict[str, Any]:
    """Train `config` to `trainer.iterations` (or `trainer.max_env_steps`); returns the run's summary."""
    from gigpo.trainer.distributed import broadcast_object
    from gigpo.trainer.setup import set_up

    run = set_up(config, resume)
    r = config.rollout
    # rollout.mode: where rollouts play and how weights reach the generator (async: on a producer thread,
    # the next rollout overlapping this update; gigpo/trainer/pipeline.py)
    run.loop.pipeline = RolloutPipeline((lambda iteration: play(run, iteration)) if run.share else None, run.generator,
                                        r.mode, r.max_staleness, version=run.state["iteration"],
                                        last_iteration=config.trainer.iterations, correction=correction_from_config(config),
                                        mixed_versions=r.group_versions == "mixed")
    try:
        if broadcast_object(run.state["iteration"] == 0 and not (run.run_dir / "metrics.jsonl").exists()):
            # iteration 0: the starting policy (after warm-up, if any), so curves have a baseline
            baseline = evaluate_shared(run, 0)
            if run.main:
                run.logger.log(0, {**baseline, "rollout/env_steps_total": 0})
        for iteration in range(run.state["iteration"] + 1, config.trainer.iterations + 1):
            if run_iteration(run, iteration):
                break
        return finish(run.run_dir, run.state) if run.main else {}
    finally:
        run.close()


def run_iteration(run: Run, iteration: int) -> bool:
    """One iteration on every rank: play (each rank its share), learn, evaluate, checkpoint, log. True when it
    was the last."""
    from gigpo.trainer.checkpoint import save_checkpoint
    from gigpo.trainer.metrics import PhaseTimer

    t = run.config.trainer
    timer, metrics, started = PhaseTimer(), {}, time.perf_counter()
    with timer("rollout"):  # played now (sync), or waited for: it started during the last update (async)
        played = run.pipeline.collect(iteration) if run.share else None
        batch, episodes, rollout_metrics, rows_total = own_share(run, iteration, played)  # this rank's steps
    metrics.update(rollout_metrics)
    run.state["env_steps_total"] += int(metrics["rollout/env_steps"])  # the same sum on every rank
    metrics["rollout/env_steps_total"] = float(run.state["env_steps_total"])
    last = iteration == t.iterations or bool(t.max_env_steps and run.state["env_steps_total"] >= t.max_env_steps)

    if rows_total:  # dynamic sampling can drop every group; such an iteration only plays, evaluates and saves
        learn(run, iteration, batch, episodes, last, timer, metrics)
    if iteration % t.eval_every == 0 or last:  # the final policy is always evaluated
        with timer("eval"):
            metrics.update(evaluate_shared(run, iteration))
    metrics.update(timer.metrics())
    metrics["time/iteration"] = time.perf_counter() - started
    metrics["perf/peak_rss_gb"] = peak_rss_gb()

    # ---- checkpoint (collective), then the metrics line that says the iteration is done
    run.state["iteration"] = iteration
    if iteration % t.save_every == 0 or last:
        save_checkpoint(run.run_dir, iteration, run.actor, run.tokenizer, run.critic, loop_state=run.state,
                        keep_last=t.keep_last)
    if run.main:
        run.logger.log(iteration, metrics)
        print(run.logger.summary_line(iteration, t.iterations, metrics), flush=True)
        if last and iteration < t.iterations:
            print(f"gigpo: reached trainer.max_env_steps={t.max_env_steps}; stopping", flush=True)
    return last


# --------------------------------------------------------------------------- rollout (each rank its share)

def play(run: Run, iteration: int) -> tuple["StepRows", list, dict[str, float], "Rollout"]:
    """This rank's share of the B groups x N episodes (re-drawing uninformative groups under dynamic
    sampling): the steps to train on, the episodes played, their metrics and the first draw's rollout
    without its rows (for the merged rates). Runs on the pipeline's producer thread in async mode, so it
    touches only the pool, the generator and its own metrics, and makes no collective."""
    from gigpo.advantage.rows import StepRows
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.evaluation import EpisodeBar
    from gigpo.trainer.setup import sampling

    config, e, metrics = run.config, run.config.env, {}
    generator = run.pipeline.generator
    share = run.share.of(e.num_groups)
    if not share:  # fewer task groups than playing ranks: this rank sits the rollout out
        from gigpo.rollout.records import Rollout

        return StepRows.empty(), [], {}, Rollout(StepRows.empty(), [])
    seed = rank_sampling_seed(rollout_sampling_seed(config.trainer.seed, iteration), run.share.rank,
                              per_request=generator.turns == "async")
    settings = sampling(config, evaluation=False, seed=seed, iteration=iteration)
    bar = EpisodeBar(f"iter {iteration} rollout", config.logging.progress and run.main)
    with stop_on_nonfinite_rows(f"iteration {iteration}, phase rollout"):
        played = rollout(run.pool, generator, run.prompt_fn, train_seeds(config, iteration)[share.start:share.stop],
                         e.group_size, settings, config.rollout.max_prompt_tokens, group_offset=share.start,
                         progress=bar)
    bar.close()
    metrics.update(played.metrics())
    metrics.update(played.env_faults)
    metrics.update(run.pool.stats().as_metrics())
    rows, episodes = played.steps, played.episodes
    if config.algorithm.dynamic_sampling:
        rows, episodes = redraw_uninformative(run, iteration, rows, episodes, settings, metrics)
    metrics["time/generate"] = played.seconds_generate
    metrics["time/env"] = played.seconds_env
    return rows, episodes, metrics, replace(played, steps=StepRows.empty())


def redraw_uninformative(run: Run, iteration: int, rows: "StepRows", episodes: list, settings: "SamplingSettings",
                         metrics: dict[str, float]) -> tuple["StepRows", list]:
    """Dynamic sampling: re-draw task groups until B have differing returns (or `max_resample` re-draws);
    keep the first B of those. Each rank re-draws its own share of the groups until its share has differing
    returns, so no rank waits on another mid-rollout. Every step played counts toward the env-step budget."""
    from gigpo.advantage.rows import StepRows
    from gigpo.advantage.sampling import informative_groups
    from gigpo.rollout.collect import rollout

    config, e, a = run.config, run.config.env, run.config.algorithm
    informative = lambda r: {int(g) for g in r.group[informative_groups(r)]}  # noqa: E731
    share, generator = run.share.of(e.num_groups), run.pipeline.generator
    draws, keep = [rows], informative(rows)
    for draw in range(1, a.max_resample + 1):
        if len(keep) >= len(share):
            break
        seed = rank_sampling_seed(rollout_sampling_seed(config.trainer.seed, iteration, draw), run.share.rank,
                                  per_request=generator.turns == "async")
        with stop_on_nonfinite_rows(f"iteration {iteration}, re-draw {draw}"):
            extra = rollout(run.pool, generator, run.prompt_fn,
                            train_seeds(config, iteration, draw)[share.start:share.stop], e.group_size,
                            replace(settings, seed=seed), config.rollout.max_prompt_tokens,
                            group_offset=draw * e.num_groups + share.start)
        draws.append(extra.steps)
        episodes = episodes + extra.episodes
        keep |= informative(draws[-1])
        metrics["rollout/draws"] = float(draw + 1)
    kept = sorted(keep)[: len(share)]
    metrics["rollout/kept_groups"] = float(len(kept))
    rows = StepRows.concat(draws)
    metrics["rollout/env_steps"] = float(len(rows))
    rows = rows.select(np.isin(rows.group, kept))
    metrics["rollout/trained_steps"] = float(len(rows))
    return rows, episodes


def own_share(run: Run, iteration: int, played: Optional[tuple]) -> tuple["StepRows", list, dict[str, float], int]:
    """This rank's steps of the iteration (none where it plays nothing), every rank's episode summaries,
    the rollout's metrics merged over ranks, and the step count of every rank together. Steps stay where
    they were played; only episode summaries and metrics cross ranks. Where rank 0 alone plays (a remote
    server), it scatters its groups instead, a share to each rank, so that the update
    stays spread over the ranks. One rank: its own, unchanged."""
    from gigpo.advantage.rows import StepRows
    from gigpo.trainer.distributed import all_gather_objects, all_reduce_floats, scatter_objects
    from gigpo.trainer.sharding import merge_metrics, merge_rollouts, split_groups

    if run.world_size == 1:
        rows, episodes, metrics, _ = played
        rows_total = len(rows)
    else:
        rows = played[0] if played is not None else StepRows.empty()
        mine = None if played is None or not run.share.reports else played[1:]  # a replica's repeat its engine's first
        parts = [p for p in all_gather_objects(mine) if p is not None]
        episodes = sorted((e for p in parts for e in p[0]), key=lambda e: e.traj)
        metrics = merge_metrics([p[1] for p in parts], merge_rollouts([p[2] for p in parts]))
        rows_total = int(all_reduce_floats([len(rows)])[0])
        if run.share is None or run.share.ranks * run.share.replicas < run.world_size:  # rank 0 played every group
            rows = scatter_objects(split_groups(rows, run.world_size) if run.main else None)
    if run.config.algorithm.dynamic_sampling and not rows_total and run.main:
        print(f"gigpo: iteration {iteration}: no group with differing returns after "
              f"{int(metrics.get('rollout/draws', 1))} draw(s); skipping the update "
              f"(raise algorithm.max_resample or make the start stronger)", flush=True)
    return rows, episodes, metrics, rows_total


def evaluate_shared(run: Run, iteration: int) -> dict[str, float]:
    """Every rank plays its share of the held-out tasks; the merged evaluation's metrics on every rank
    (rank 0 records its episodes). In async mode a share plays where its generator lives: after the rollout
    in flight. The gather runs here, on the loop's thread, never on the producer's."""
    from gigpo.advantage.rows import StepRows
    from gigpo.trainer.distributed import all_gather_objects
    from gigpo.trainer.evaluation import play_evaluation
    from gigpo.trainer.sharding import merge_rollouts

    with stop_on_nonfinite_rows(f"iteration {iteration}, phase eval"):
        local = run.pipeline.call(lambda: play_evaluation(run.config, run.eval_pool, run.generator, run.prompt_fn,
                                                          share=run.share)) if run.share else None
    hook = run.recorder.eval_hook(iteration)
    if run.world_size > 1 and local is not None and hook is None:  # steps travel only for the record
        local = replace(local, steps=StepRows.empty())
    if local is not None and not run.share.reports:  # a replica of an engine's first rank: the same episodes
        local = None
    result = local if run.world_size == 1 else merge_rollouts(all_gather_objects(local))
    if run.main and hook is not None:
        hook(result)
    return result.metrics("eval/")


# --------------------------------------------------------------------------- learning (every rank)

def learn(run: Run, iteration: int, rows: "StepRows", episodes: Optional[list], last: bool, timer,
          metrics: dict[str, float]) -> None:
    """Advantages, old and reference log-probs, the PPO-clip update (and the critic's), the weight sync, each
    rank on its own steps (possibly none: it still runs every collective the others run)."""
    from gigpo.rollout.weight_sync import push_weights
    from gigpo.trainer.distributed import all_gather_objects
    from gigpo.trainer.memory_phases import enter_phase
    from gigpo.trainer.samples import bare_samples, train_samples, with_advantages
    from gigpo.trainer.sharding import merge_gaps, merge_staleness

    a, t = run.config.algorithm, run.config.trainer
    actor, critic = run.actor, run.critic
    metrics.update(enter_phase(run, "update"))  # vLLM sleeps, the reference returns (CUDA; memory_phases.py)
    # ---- advantages on the real rows only (no padding, no duplicates), of this rank's own groups: every
    # estimator is group-local (PPO's GAE per trajectory), so they equal those of one rank holding every group
    with timer("advantage"):
        token_values = critic.compute_values(bare_samples(rows)) if critic is not None else None  # PPO's V(s_t)
        if len(rows):
            rows = with_advantages(rows, a, split_versions=run.config.rollout.group_versions != "mixed",
                                   token_values=token_values,
                                   placebo=(t.seed, iteration) if a.shuffle_advantages else None,
                                   where=f"iteration {iteration}, phase advantage")
        metrics.update(report_advantages(run, iteration, last, rows, episodes))
    if run.share is not None and run.share.replicas > 1 and len(rows):  # the engine's ranks split its rows
        rows = rows.select(run.share.own_rows(len(rows)))
    samples = train_samples(rows, run.tokenizer, behaviour_as_old=run.from_generator) if len(rows) else []
    # the generator's log-probs: none on a rank without steps, and none where this iteration's generation asked
    # for none (rollout.logp_gap_every; then the gap is not measured: logprob_gap compares no token)
    behaviour = rows.behaviour_logprobs or ()

    # ---- log-probs: old (the generator's where exact, else the actor's before the update) and reference (KL)
    with timer("logprobs"):
        if run.from_generator:  # the gap is still logged, on a cheap sample, so a generator/trainer mismatch shows
            probe = random.Random(probe_seed(t.seed, iteration)).sample(range(len(samples)), min(GAP_PROBE, len(samples)))
            probe_logps = actor.compute_log_probs([samples[i] for i in probe])
            gap = logprob_gap([behaviour[i] for i in probe], probe_logps)
        else:
            old = actor.compute_log_probs(samples)
            for sample, logp in zip(samples, old):
                sample.logp_old = logp
            gap = logprob_gap(behaviour, old)
        gap = gap if run.world_size == 1 else merge_gaps(all_gather_objects(gap))
        if run.main:
            metrics.update(gap_metrics(gap))
        if run.reference is not None:
            for sample, logp in zip(samples, run.reference.compute_log_probs(samples)):
                sample.logp_ref = logp
        # async mode: every sample's staleness checked; with the rollout correction, the generator's log-probs attached
        lag = run.pipeline.correct(samples, rows.policy_version if len(rows) else [], behaviour)
        metrics.update(lag if run.world_size == 1 else merge_staleness(all_gather_objects((lag, len(samples)))))

    # ---- PPO-clip update (and the critic's)
    with timer("update"):
        update_metrics = actor.update(samples)
        if critic is not None:
            update_metrics.update(critic.update(samples))
        require_finite("loss", [v for k, v in update_metrics.items() if k.startswith("loss/")],
                       f"iteration {iteration}, phase update")
        metrics.update(update_metrics)

    # ---- weight sync into the generator
    metrics.update(enter_phase(run, "generation"))  # vLLM wakes before its weights are reloaded
    with timer("sync"):  # async mode: queued for the producer, loaded between two rollouts
        metrics.update(push_weights(actor, run.generator, iteration, run.verifier, run.pipeline))


def report_advantages(run: Run, iteration: int, last: bool, rows: "StepRows", episodes: list) -> dict[str, float]:
    """On rank 0: the step-group and revisit diagnostics of every rank's rows, and (when due) the records
    for `gigpo view` and the rows file (logging.log_rollouts). With several ranks each sends rank 0 its rows'
    ids, rewards, anchor keys and advantages (numbers, no tokens); its steps' texts only when a record or
    rows file is due. Every rank calls it (a collective)."""
    from gigpo.advantage.diagnostics import revisit_diagnostics, step_group_diagnostics
    from gigpo.trainer.distributed import all_gather_objects
    from gigpo.trainer.sharding import advantage_part, merge_advantage_parts

    recorder, log_rows = run.recorder, run.config.logging.log_rollouts
    due = bool(recorder.every) and (iteration % recorder.every == 0 or last)
    if run.world_size > 1:
        reports = run.share is None or run.share.reports  # a replica's rows repeat its engine's first rank's
        part = advantage_part(rows, with_texts=due or log_rows) if len(rows) and reports else None
        rows = merge_advantage_parts(all_gather_objects(part), run.config.env.num_groups)
        if rows is None:  # no rank trained a step (cannot happen: learn() runs only when some rank has rows)
            return {}
    if not run.main:
        return {}
    metrics = {**step_group_diagnostics(rows), **revisit_diagnostics(rows)}
    recorder.after_advantage(iteration, last, rows, episodes)
    if log_rows:
        from gigpo.advantage.jsonl import write_step_rows

        write_step_rows(run.run_dir / "rollouts" / f"{iteration:06d}.jsonl", rows)
    return metrics


def logprob_gap(generator_logps: Sequence[Sequence[float]], trainer_logps: Sequence[Any]) -> tuple[float, int, float]:
    """How far the generator's log-probs are from the trainer's: the sum, count and max of |diff| over the
    response tokens (sharding.merge_gaps adds the ranks' up; gap_metrics makes the metrics)."""
    if not generator_logps:
        return 0.0, 0, float("-inf")
    diffs = np.concatenate([np.abs(np.asarray(g, dtype=np.float64) - t.double().numpy())
                            for g, t in zip(generator_logps, trainer_logps)])
    return float(diffs.sum()), int(diffs.size), float(diffs.max())


def gap_metrics(gap: tuple[float, int, float]) -> dict[str, float]:
    """`rollout/logp_gap_mean` and `_max` per response token (none when no token was compared)."""
    total, count, largest = gap
    return {"rollout/logp_gap_mean": total / count, "rollout/logp_gap_max": largest} if count else {}


def peak_rss_gb() -> float:
    """Peak resident memory of this process and its finished children (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 2**20


# --------------------------------------------------------------------------- end of a run, and the launch

def finish(run_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """Curves, a final summary on the console, and `done.json` (what `gigpo compare` looks for)."""
    from gigpo.experiments.plots import plot_run
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


def launch_or_train(config: Config, resume: bool) -> int:
    """`gigpo train`: relaunch through DeepSpeed's launcher for several ranks, else train here."""
    import sys

    from gigpo.trainer.distributed import relaunch_if_needed

    code = relaunch_if_needed(sys.argv[1:], config.trainer.nprocs)
    if code is not None:
        return code
    train(config, resume=resume)
    return 0
