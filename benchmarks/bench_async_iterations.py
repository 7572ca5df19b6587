"""Env steps/s of whole training iterations, rollout.mode=async against sync, on a latency-bound env.

    PYTHONPATH=. python benchmarks/bench_async_iterations.py [--iterations 6] [--median-s 0.2 --p99-s 2.0] [overrides ...]

Each configuration is one real `gigpo train` run (sokoban_tiny's tiny untrained model on the in-process
vLLM engine, DeepSpeed update, no warm-up) on gigpo/Latency-v0 around the recipe's Sokoban: every env step
first sleeps a lognormal time, median 200 ms and 99th percentile 2 s, like a web tool. 8 groups x 4
episodes of 8 steps, one env worker per episode. Four runs, in this order:

    sync / batched turns,  async / batched turns,  sync / async turns,  async / async turns

env steps/s = env steps trained on over the training loop's wall time (the sum of `time/iteration` less
the final evaluation's `time/eval`; start-up and the iteration-0 evaluation are not counted). The last
lines give the ratios taken in this one run: rollout.mode=async over sync at each turns setting (what
item 2 of issue 27 adds), and everything async over everything sync (items 1 and 2 together; target >= 2).
Under each sync run, `overlap bound` is what overlapping each rollout with the rest of its iteration could
give at best: sum(iteration) / sum(max(rollout, rest)); one rollout in flight cannot pass it, so a
latency-bound env whose rollouts dwarf the update gains little from rollout.mode alone. `--turns batched`
or `async` runs one pair only. An untrained model never writes a valid action, so every episode runs its
8 steps in every configuration.
On 2 shared cores the load average says how busy the machine was.

`--as-is --turns auto` times a recipe as users run it instead (its own env, groups and backend, no injected
latency, no warm-up), one sync run then one async run, e.g. for the SmolLM2 recipe:

    PYTHONPATH=. python benchmarks/bench_async_iterations.py --recipe recipes/sokoban_smollm2.yaml --as-is --turns auto --iterations 4
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = (("sync", "batched"), ("async", "batched"), ("sync", "async"), ("async", "async"))


def loadavg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def latency_env_overrides(args: argparse.Namespace) -> list[str]:
    """The recipe's Sokoban behind gigpo/Latency-v0, 8 groups x 4 on the in-process vLLM engine."""
    kwargs = (f"{{env: gigpo/Sokoban-v0, median_s: {args.median_s}, p99_s: {args.p99_s}, size: 5, num_boxes: 1, "
              "solution_length: [1, 4]}")
    return ["env.id=gigpo/Latency-v0", f"env.kwargs={kwargs}", "env.num_groups=8", "env.group_size=4",
            "env.max_steps=8", "env.workers=32", "rollout.backend=vllm", "rollout.enforce_eager=true"]


def run(mode: str, turns: str, args: argparse.Namespace, run_dir: Path) -> dict[str, float]:
    env = [] if args.as_is else latency_env_overrides(args)
    overrides = [*env, "env.eval_episodes=8", "trainer.sft_steps=0",
                 f"trainer.iterations={args.iterations}", "trainer.eval_every=100000", "trainer.save_every=100000",
                 "logging.progress=false", "logging.wandb_mode=disabled", "logging.rollouts_every=0",
                 f"trainer.run_dir={run_dir}", f"rollout.mode={mode}", f"rollout.turns={turns}",
                 "rollout.max_staleness=1", *args.overrides]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gigpo.cli", "train", args.recipe, *overrides], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    if proc.returncode != 0:
        sys.exit(f"{mode}/{turns} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    steps = sum(r["rollout/env_steps"] for r in records)
    seconds = sum(r["time/iteration"] - r.get("time/eval", 0.0) for r in records)
    mean = lambda key: sum(r.get(key, 0.0) for r in records) / len(records)  # noqa: E731
    # what overlapping rollout k+1 with the rest of iteration k could give at best, from a sync run's phases
    rest = [r["time/iteration"] - r.get("time/eval", 0.0) - r["time/rollout"] for r in records]
    bound = seconds / sum(max(r["time/rollout"], x) for r, x in zip(records, rest))
    out = {"steps": steps, "seconds": seconds, "rate": steps / seconds, "rollout_wait": mean("time/rollout"),
           "update": mean("time/update"), "lag": max(r.get("async/staleness_max", 0.0) for r in records),
           "total_s": time.perf_counter() - t0}
    print(f"{mode:>5} mode, {turns:>7} turns: {steps:.0f} env steps in {seconds:.1f} s = {out['rate']:.1f} steps/s "
          f"(per iteration: rollout wait {out['rollout_wait']:.2f} s, update {out['update']:.2f} s; max staleness "
          f"{out['lag']:.0f}; whole run {out['total_s']:.0f} s); loadavg {loadavg()}", flush=True)
    waits = " ".join(f"{r['time/rollout']:.1f}" for r in records)
    print(f"    per iteration: rollout wait {waits} s; rest {' '.join(f'{x:.1f}' for x in rest)} s"
          + (f"; overlap bound {bound:.2f}x" if mode == "sync" else ""), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="recipes/sokoban_tiny.yaml")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--median-s", type=float, default=0.2)
    ap.add_argument("--p99-s", type=float, default=2.0)
    ap.add_argument("--turns", choices=["batched", "async", "both", "auto"], default="both",
                    help="which turns settings to run (auto: the recipe's own, one pair)")
    ap.add_argument("--as-is", action="store_true", help="the recipe's own env, groups and backend, no injected latency")
    ap.add_argument("overrides", nargs="*", help="more recipe overrides for every run")
    args = ap.parse_args()
    setting = "the recipe's own env" if args.as_is else f"latency median {args.median_s} s p99 {args.p99_s} s"
    print(f"{args.recipe}: {args.iterations} iterations per run, {setting}; loadavg {loadavg()}", flush=True)
    runs = [("sync", "auto"), ("async", "auto")] if args.turns == "auto" else RUNS
    with tempfile.TemporaryDirectory(prefix="bench_async_iterations_") as tmp:
        rates = {(mode, turns): run(mode, turns, args, Path(tmp) / f"{mode}_{turns}")["rate"] for mode, turns in runs
                 if args.turns in (turns, "both")}
    for turns in ("batched", "async") if args.turns == "both" else (args.turns,):
        print(f"{turns} turns: async_mode_steps_s={rates['async', turns]:.1f} sync_mode_steps_s={rates['sync', turns]:.1f} "
              f"mode_ratio={rates['async', turns] / rates['sync', turns]:.2f} loadavg={loadavg()}")
    if args.turns != "both":
        return
    print(f"all_async_steps_s={rates['async', 'async']:.1f} all_sync_steps_s={rates['sync', 'batched']:.1f} "
          f"ratio={rates['async', 'async'] / rates['sync', 'batched']:.2f} loadavg={loadavg()}")


if __name__ == "__main__":
    main()
