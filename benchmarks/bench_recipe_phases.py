"""Per-phase time of a recipe's training iterations under setting variants, against the first variant.

    PYTHONPATH=. python benchmarks/bench_recipe_phases.py recipes/sokoban_smollm2.yaml --iterations 5 \
        --common env.num_groups=3 env.group_size=8 \
        --variant base: --variant budget4k:trainer.micro_token_budget=4096

Each variant is one real `gigpo train` of the recipe (its warm-up included, cached after the first run) with
the common overrides, then the variant's own (comma-separated), for `--iterations` iterations with no
evaluation or checkpoint in between (the final evaluation, on 8 episodes, is left out of the times). Same seed everywhere: iteration 1 of every variant starts from the same
weights and plays the same tasks; later iterations diverge once a variant changes what is learned.
Printed per variant: the median over iterations 2..N (iteration 1 pays one-off compilation) of each phase,
seconds per iteration and per env step, and the ratio of the first variant's seconds per env step to this
one's (above 1 = faster). Rows per iteration vary with the policy, so compare per env step. The load
average after each run says how busy the 2 cores were; timings are only worth reading on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("time/generate", "time/logprobs", "time/update", "time/sync", "time/advantage", "time/iteration")


def run_variant(recipe: str, common: list[str], extra: list[str], iterations: int, run_dir: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "gigpo.cli", "train", recipe, *common, *extra, f"trainer.iterations={iterations}",
           "trainer.eval_every=100000", "trainer.save_every=100000", "env.eval_episodes=8", "logging.progress=false",
           "logging.wandb_mode=disabled", "logging.rollouts_every=0", f"trainer.run_dir={run_dir}"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"variant {extra} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "time/iteration" in r]


def summarise(rows: list[dict]) -> dict[str, float]:
    timed = rows[1:] if len(rows) > 1 else rows
    out = {p: statistics.median(r.get(p, 0.0) for r in timed) for p in PHASES}
    steps = sum(r["rollout/env_steps"] for r in timed)
    out["env_steps"] = steps / len(timed)
    # the last iteration also runs the final evaluation (8 episodes here): its time is not training's
    out["s_per_step"] = sum(r["time/iteration"] - r.get("time/eval", 0.0) for r in timed) / steps
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--common", nargs="*", default=[])
    parser.add_argument("--variant", action="append", required=True,
                        help="name:override,override (the first one is the baseline)")
    args = parser.parse_args()
    results: list[tuple[str, dict[str, float], str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-phases-") as root:
        for spec in args.variant:
            name, _, overrides = spec.partition(":")
            extra = [o for o in overrides.split(",") if o]
            start = time.monotonic()
            rows = run_variant(args.recipe, args.common, extra, args.iterations, Path(root) / name)
            load = "/".join(f"{x:.2f}" for x in os.getloadavg())
            figures = summarise(rows)
            results.append((name, figures, load))
            print(f"{name}: {json.dumps({k: round(v, 3) for k, v in figures.items()})} wall={time.monotonic() - start:.0f}s "
                  f"load={load}", flush=True)
    base = results[0][1]["s_per_step"]
    print("\n| variant | env steps/iter | generate | logprobs | update | sync | iteration (s) | ms/env step | x first | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, f, load in results:
        print(f"| {name} | {f['env_steps']:.0f} | {f['time/generate']:.1f} | {f['time/logprobs']:.1f} | {f['time/update']:.1f} | "
              f"{f['time/sync']:.1f} | {f['time/iteration']:.1f} | {1000 * f['s_per_step']:.0f} | {base / f['s_per_step']:.2f} | {load} |")


if __name__ == "__main__":
    main()
