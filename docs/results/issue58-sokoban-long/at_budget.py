"""The paired differences at an earlier budget, from the 150k runs (the issue asks for the 100k point too).

    PYTHONPATH=. python docs/results/issue58-sokoban-long/at_budget.py runs/e6x 100000

Each run is cut at the first iteration whose env_steps_total reaches the budget; its evaluations up to there are
kept, and the report's two measures are taken from them: the last evaluation, and the mean of the last 3 after the
start. E6's GiGPO and GRPO runs stopped at 100k and were resumed, so they hold an evaluation at that iteration;
the new arms ran through it and hold evaluations every 5 iterations only. Prints one line per pair.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from gigpo.experiments.paired import paired_stats


def cut(run: Path, budget: float) -> list[float]:
    success = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "eval/success" in record:
            success.append(record["eval/success"])
        if record.get("rollout/env_steps_total", 0) >= budget:
            break
    return success


def main() -> None:
    out, budget = Path(sys.argv[1]), float(sys.argv[2])
    algos, seeds = ("gigpo", "grpo", "hgpo", "graphgpo"), range(5)
    evals = {(a, s): cut(out / f"{a}-s{s}", budget) for a in algos for s in seeds if (out / f"{a}-s{s}" / "done.json").is_file()}
    final = {k: v[-1] for k, v in evals.items()}
    last3 = {k: float(np.mean(v[1:][-3:])) for k, v in evals.items()}
    for a in algos:
        got = [s for s in seeds if (a, s) in evals]
        print(f"{a}: {len(got)} seeds, at {budget:,.0f}: last {100 * np.mean([final[a, s] for s in got]):.1f}, "
              f"mean of last 3 {100 * np.mean([last3[a, s] for s in got]):.1f} ± {100 * np.std([last3[a, s] for s in got], ddof=1):.1f}")
    for a, b in (("hgpo", "gigpo"), ("graphgpo", "gigpo"), ("hgpo", "grpo"), ("graphgpo", "grpo"), ("gigpo", "grpo")):
        for name, measure in (("last", final), ("last 3", last3)):
            st = paired_stats({s: measure[a, s] for s in seeds if (a, s) in measure},
                              {s: measure[b, s] for s in seeds if (b, s) in measure})
            print(f"{a} - {b} ({name}, {st.n} pairs): {', '.join(f'{100 * d:+.1f}' for d in st.diffs)}; mean "
                  f"{100 * st.mean:+.1f} [{100 * st.ci_low:+.1f}, {100 * st.ci_high:+.1f}], p {st.p_t:.3f}")


if __name__ == "__main__":
    main()
