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

import random
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

from gigpo.config import Config
from gigpo.infra.seeds import probe_seed, rank_sampling_seed, rollout_sampling_seed, train_seeds
from gigpo.trainer.nonfinite import require_finite, stop_on_nonfinite_rows
from gigpo.trainer.pipeline import RolloutPipeline
from gigpo.trainer.rollout_correction import correction_from_config
from gigpo.trainer.setup import Run

if TYPE_CHECKING:
    from gigpo.advantage.rows import StepRows
    from gigpo.rollout.records import Rollout

GAP_PROBE = 32
"""Samples whose log-probs the trainer recomputes each iteration when the old ones come from the generator."""


def train(config: Config, resume: bool = False) -> dict[str, Any]:
    """Train `config` to `trainer.iterations` (or `trainer.max_env_steps`); returns the run's summary."""
    from gigpo.trainer.distributed import broadcast_object
    from gigpo.trainer.metrics import finish
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
    from gigpo.trainer.memory import peak_rss_gb
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
        from gigpo.trainer.dynamic_sampling import redraw_uninformative

        rows, episodes = redraw_uninformative(run, iteration, rows, episodes, settings, metrics)
    metrics["time/generate"] = played.seconds_generate
    metrics["time/env"] = played.seconds_env
    return rows, episodes, metrics, replace(played, steps=StepRows.empty())


def own_share(run: Run, iteration: int, played: Optional[tuple]) -> tuple["StepRows", list, dict[str, float], int]:
    """This rank's steps of the iteration, every rank's episode summaries, the rollout's metrics merged over
    ranks, and the step count of every rank together (sharding.gather_share). One rank: its own, unchanged."""
    from gigpo.trainer.sharding import gather_share

    if run.world_size == 1:
        rows, episodes, metrics, _ = played
        rows_total = len(rows)
    else:
        rows, episodes, metrics, rows_total = gather_share(played, run.share, run.world_size, run.main)
    if run.config.algorithm.dynamic_sampling and not rows_total and run.main:
        print(f"gigpo: iteration {iteration}: no group with differing returns after "
              f"{int(metrics.get('rollout/draws', 1))} draw(s); skipping the update "
              f"(raise algorithm.max_resample or make the start stronger)", flush=True)
    return rows, episodes, metrics, rows_total


def evaluate_shared(run: Run, iteration: int) -> dict[str, float]:
    """Every rank plays its share of the held-out tasks; the merged evaluation's metrics on every rank
    (rank 0 records its episodes). In async mode a share plays where its generator lives: after the rollout
    in flight. The gather runs here, on the loop's thread, never on the producer's."""
    from gigpo.trainer.evaluation import play_evaluation
    from gigpo.trainer.sharding import gather_evaluation

    with stop_on_nonfinite_rows(f"iteration {iteration}, phase eval"):
        local = run.pipeline.call(lambda: play_evaluation(run.config, run.eval_pool, run.generator, run.prompt_fn,
                                                          share=run.share)) if run.share else None
    hook = run.recorder.eval_hook(iteration)
    result = local if run.world_size == 1 else gather_evaluation(local, run.share, keep_steps=hook is not None)
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
    from gigpo.trainer.samples import bare_samples, train_samples, with_advantages
    from gigpo.trainer.logprob_gap import gap_metrics, logprob_gap
    from gigpo.trainer.sharding import merge_gaps, merge_staleness

    a, t = run.config.algorithm, run.config.trainer
    actor, critic = run.actor, run.critic
    metrics.update(run.memory_phases.enter("update"))  # vLLM sleeps, the reference returns (CUDA; memory_phases.py)
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
    metrics.update(run.memory_phases.enter("generation"))  # vLLM wakes before its weights are reloaded
    with timer("sync"):  # async mode: queued for the producer, loaded between two rollouts
        metrics.update(push_weights(actor, run.generator, iteration, run.verifier, run.pipeline))


def report_advantages(run: Run, iteration: int, last: bool, rows: "StepRows", episodes: list) -> dict[str, float]:
    """On rank 0: the step-group and revisit diagnostics of every rank's rows, and (when due) the records
    for `gigpo view` and the rows file (logging.log_rollouts). With several ranks each sends rank 0 its rows'
    ids, rewards, anchor keys and advantages (numbers, no tokens); its steps' texts only when a record or
    rows file is due. Every rank calls it (a collective)."""
    from gigpo.advantage.diagnostics import revisit_diagnostics, step_group_diagnostics
    from gigpo.trainer.sharding import gather_advantage_rows

    recorder, log_rows = run.recorder, run.config.logging.log_rollouts
    due = bool(recorder.every) and (iteration % recorder.every == 0 or last)
    if run.world_size > 1:
        rows = gather_advantage_rows(rows, run.share, with_texts=due or log_rows, num_groups=run.config.env.num_groups)
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


# --------------------------------------------------------------------------- the launch

def launch_or_train(config: Config, resume: bool) -> int:
    """`gigpo train`: relaunch through DeepSpeed's launcher for several ranks, else train here."""
    import sys

    from gigpo.trainer.distributed import relaunch_if_needed

    code = relaunch_if_needed(sys.argv[1:], config.trainer.nprocs)
    if code is not None:
        return code
    train(config, resume=resume)
    return 0
