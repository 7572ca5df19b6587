"""GiGPO's cost over GRPO inside a real training iteration, from the trainer's per-phase timings.

    PYTHONPATH=. python benchmarks/bench_iteration.py [--iterations 3] [recipe overrides ...]

Runs `gigpo train` on the same recipe and seed with `algorithm.estimator=gigpo` and `=grpo` and
compares the phases. Both share every phase but the advantage computation; iteration 1 of both runs
plays the very same episodes (same seed, same starting weights), so its times compare like for like.
Last line: `gigpo_iter_s=... grpo_iter_s=... advantage_ms gigpo=... grpo=... overhead=...%`, where
overhead is GiGPO's extra advantage time as a share of GRPO's iteration time (the target is < 2%).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PHASES = ("time/rollout", "time/advantage", "time/logprobs", "time/update", "time/sync", "time/iteration")
# a short warm-up so that episodes move through real states (a random model's invalid actions leave
# every group in one state, which would make GiGPO's step groups trivially large)
SHRINK = ["env.num_groups=8", "env.eval_episodes=8", "trainer.sft_steps=150", "trainer.sft_rooms=500", "trainer.eval_every=1000",
          "logging.wandb_mode=disabled", "logging.progress=false"]


def run(estimator: str, iterations: int, overrides: list[str], root: Path) -> list[dict]:
    run_dir = root / estimator
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SHRINK, *overrides,
           f"algorithm.estimator={estimator}", f"trainer.iterations={iterations}", f"trainer.run_dir={run_dir}",
           f"trainer.save_every={iterations}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["iteration"] > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: run(name, args.iterations, args.overrides, Path(tmp)) for name in ("gigpo", "grpo")}
    print(f"{'phase':<16}" + "".join(f"{name + ' it1':>12}{name + ' mean':>12}" for name in results))
    for phase in PHASES:
        cells = ""
        for records in results.values():
            mean = sum(r.get(phase, 0.0) for r in records) / len(records)
            cells += f"{records[0].get(phase, 0.0):>12.3f}{mean:>12.3f}"
        print(f"{phase:<16}{cells}")
    g, r = results["gigpo"][0], results["grpo"][0]
    overhead = (g["time/advantage"] - r["time/advantage"]) / r["time/iteration"] * 100
    print(f"rows per iteration: {int(g['adv/rows'])}; step groups (gigpo): {int(g['adv/step_groups'])}, "
          f"mean size {g['adv/step_group_size_mean']:.2f}, singleton rows {g['adv/singleton_row_share']:.0%}")
    print("iteration 1 plays the same episodes in both runs, so its rollout matches; the other phases differ by "
          "machine noise, since only the advantage phase runs different code")
    print(f"gigpo_iter_s={g['time/iteration']:.2f} grpo_iter_s={r['time/iteration']:.2f} "
          f"advantage_ms gigpo={g['time/advantage'] * 1e3:.2f} grpo={r['time/advantage'] * 1e3:.2f} overhead={overhead:.4f}%")


if __name__ == "__main__":
    main()
