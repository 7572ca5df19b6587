"""`gigpo compare`: the same recipe under several algorithms and seeds, then one markdown report.

Each run is an ordinary `gigpo train` in its own run directory (`OUT/<algo>-s<seed>`). A run that
finished has `done.json`; an interrupted one is resumed from its checkpoint, so a comparison that was
stopped continues run by run. The report compares evaluation success against environment steps (the
cost that matters for agents), which is the x axis of the paper's sample-efficiency claim.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from gigpo.trainer.metrics import read_metrics

SUCCESS_KEY = "eval/success"
STEPS_KEY = "rollout/env_steps_total"
LEVELS = (0.3, 0.5, 0.7, 0.9)


@dataclass
class RunResult:
    algo: str
    seed: int
    steps: list[float]      # cumulative env steps at each evaluation
    success: list[float]    # eval success at those points
    iter_seconds: float
    peak_rss_gb: float
    eval_episodes: int = 0
    final_entropy: float = float("nan")   # mean token entropy of the policy over the last 5 iterations
    final_invalid: float = float("nan")   # share of invalid actions in training rollouts, last 5 iterations

    @property
    def final(self) -> float:
        return self.success[-1] if self.success else float("nan")

    @property
    def final_smoothed(self) -> float:
        """Mean of the last 3 evaluations after the start: one greedy evaluation can swing by many
        points when a small update flips the argmax in a state that every task passes through."""
        late = self.success[1:][-3:]
        return float(np.mean(late)) if late else float("nan")


def run_dir_for(out: Path, algo: str, seed: int) -> Path:
    return out / f"{algo}-s{seed}"


def train_command(recipe: str, run_dir: Path, algo: str, seed: int, budget: Optional[int],
                  overrides: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-m", "gigpo.cli", "train", recipe, f"algorithm.estimator={algo}",
           f"trainer.seed={seed}", f"trainer.run_dir={run_dir}", *overrides]
    if budget:
        cmd.append(f"trainer.max_env_steps={budget}")
    if (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir()):
        cmd.append("--resume")
    return cmd


def run_all(recipe: str, out: Path, algos: Sequence[str], seeds: Sequence[int], budget: Optional[int],
            overrides: Sequence[str], parallel: int = 1) -> None:
    """Run every (algo, seed) not yet done; `parallel` runs at once, each logging to its own file."""
    pending = [(a, s) for s in seeds for a in algos if not (run_dir_for(out, a, s) / "done.json").exists()]
    running: list[tuple[str, int, subprocess.Popen, Any]] = []
    total = len(algos) * len(seeds)
    print(f"compare: {total - len(pending)}/{total} runs already done, {len(pending)} to run", flush=True)
    child_env = dict(os.environ)
    if parallel > 1:  # share the cores instead of every run starting one thread per core
        child_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // parallel)))
    while pending or running:
        while pending and len(running) < parallel:
            algo, seed = pending.pop(0)
            run_dir = run_dir_for(out, algo, seed)
            run_dir.mkdir(parents=True, exist_ok=True)
            log = (run_dir / "train.log").open("a")
            cmd = train_command(recipe, run_dir, algo, seed, budget, overrides)
            print(f"compare: start {algo} seed {seed} -> {run_dir} (log: {run_dir / 'train.log'})", flush=True)
            running.append((algo, seed, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env), log))
        time.sleep(1.0)
        for item in list(running):
            algo, seed, proc, log = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            if proc.returncode != 0:
                for _, _, other, other_log in running:
                    other.terminate()
                    other.wait()
                    other_log.close()
                raise RuntimeError(f"run {algo} seed {seed} failed with exit code {proc.returncode}; "
                                   f"see {run_dir_for(out, algo, seed) / 'train.log'}; rerun compare to resume")
            print(f"compare: done {algo} seed {seed}", flush=True)


def load_run(out: Path, algo: str, seed: int) -> RunResult:
    records = read_metrics(run_dir_for(out, algo, seed))
    evals = [r for r in records if SUCCESS_KEY in r and STEPS_KEY in r]
    iter_times = [r["time/iteration"] for r in records if "time/iteration" in r]
    rss = [r["perf/peak_rss_gb"] for r in records if "perf/peak_rss_gb" in r]

    def tail_mean(key: str) -> float:
        values = [r[key] for r in records if isinstance(r.get(key), (int, float))][-5:]
        return float(np.mean(values)) if values else float("nan")

    return RunResult(algo, seed, [float(r[STEPS_KEY]) for r in evals], [float(r[SUCCESS_KEY]) for r in evals],
                     float(np.mean(iter_times)) if iter_times else float("nan"), max(rss) if rss else float("nan"),
                     int(evals[-1].get("eval/episodes", 0)) if evals else 0,
                     tail_mean("loss/entropy"), tail_mean("rollout/invalid_action_rate"))


def success_at(run: RunResult, budget: float) -> float:
    """Success of the last evaluation made within `budget` env steps (nan if none was)."""
    values = [s for x, s in zip(run.steps, run.success) if x <= budget]
    return values[-1] if values else float("nan")


def steps_to_reach(run: RunResult, level: float) -> float:
    for x, s in zip(run.steps, run.success):
        if s >= level:
            return x
    return float("nan")


def _fmt(values: Sequence[float], scale: float = 100.0, digits: int = 1) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "n/a"
    mean = np.mean(vals) * scale
    std = (np.std(vals, ddof=1) * scale) if len(vals) > 1 else 0.0
    missing = f" ({len(vals)}/{len(values)})" if len(vals) < len(values) else ""
    return f"{mean:.{digits}f} ± {std:.{digits}f}{missing}"


def welch_test(a: Sequence[float], b: Sequence[float]) -> str:
    from scipy import stats

    a = [v for v in a if not math.isnan(v)]
    b = [v for v in b if not math.isnan(v)]
    if len(a) < 2 or len(b) < 2:
        return "not enough seeds for a test (need 2 per side)"
    res = stats.ttest_ind(a, b, equal_var=False)
    return f"Welch t = {res.statistic:.2f}, p = {res.pvalue:.3f} (n = {len(a)} vs {len(b)} seeds)"


def efficiency_ratio(runs: dict[str, list[RunResult]], fast: str = "gigpo", slow: str = "grpo") -> Optional[str]:
    """Env steps `fast` needed to reach `slow`'s final mean success, as a share of `slow`'s steps."""
    if fast not in runs or slow not in runs:
        return None
    target = float(np.mean([r.final for r in runs[slow]]))
    start = float(np.mean([r.success[0] for r in runs[slow] if r.success]))
    if target <= start:
        return (f"no ratio: {slow}'s final mean success ({target:.1%}) is not above its start ({start:.1%}), "
                f"so there is no gain whose cost could be compared")
    slow_steps = float(np.mean([r.steps[-1] for r in runs[slow] if r.steps]))
    reach = [steps_to_reach(r, target) for r in runs[fast]]
    if any(math.isnan(x) for x in reach):
        return (f"{fast} did not reach {slow}'s final success ({target:.1%}) in every seed "
                f"({sum(not math.isnan(x) for x in reach)}/{len(reach)} did)")
    ratio = float(np.mean(reach)) / slow_steps
    return (f"{fast} reached {slow}'s final mean success ({target:.1%}) after {np.mean(reach):,.0f} env steps "
            f"on average: {ratio:.2f}x of {slow}'s {slow_steps:,.0f}")


def _standard_error_note(runs: dict[str, list[RunResult]]) -> str:
    counts = [r.eval_episodes for rs in runs.values() for r in rs if r.eval_episodes]
    if not counts:
        return ""
    n = min(counts)
    return (f" Each evaluation plays {n} episodes: the standard error of one success rate is at most "
            f"{50 / math.sqrt(n):.1f} points (at 50%).")


def write_report(out: Path, recipe: str, algos: Sequence[str], seeds: Sequence[int], command: str) -> Path:
    from gigpo.plots import plot_comparison

    runs = {a: [load_run(out, a, s) for s in seeds] for a in algos}
    max_steps = min((r.steps[-1] for rs in runs.values() for r in rs if r.steps), default=0.0)
    budgets = [max_steps * f for f in (0.25, 0.5, 0.75, 1.0)] if max_steps else []
    lines = [f"# Comparison on `{recipe}`", "", f"Command: `{command}`", "",
             f"Seeds: {', '.join(map(str, seeds))}. Success is greedy evaluation on held-out seeds, "
             "mean ± std over seeds, in percent." + _standard_error_note(runs), ""]
    lines += ["## Success at environment-step budgets", "",
              "| algorithm | start | " + " | ".join(f"{b:,.0f} steps" for b in budgets) + " | final | last 3 evaluations |",
              "|---|" + "---|" * (len(budgets) + 3)]
    for algo in algos:
        cells = [_fmt([success_at(r, b) for r in runs[algo]]) for b in budgets]
        start = _fmt([r.success[0] if r.success else float("nan") for r in runs[algo]])
        lines.append(f"| {algo} | {start} | " + " | ".join(cells) + f" | {_fmt([r.final for r in runs[algo]])} "
                     f"| {_fmt([r.final_smoothed for r in runs[algo]])} |")
    lines += ["", "## Environment steps to reach a success level", "",
              "| algorithm | " + " | ".join(f"{lv:.0%}" for lv in LEVELS) + " |", "|---|" + "---|" * len(LEVELS)]
    for algo in algos:
        cells = [_fmt([steps_to_reach(r, lv) for r in runs[algo]], scale=1.0, digits=0) for lv in LEVELS]
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    lines += ["", "(n/a: no seed reached it; (k/n): only k seeds did, mean over those.)", "",
              "## Cost", "", "| algorithm | wall time per iteration (s) | peak memory (GiB) |", "|---|---|---|"]
    for algo in algos:
        lines.append(f"| {algo} | {_fmt([r.iter_seconds for r in runs[algo]], 1.0, 2)} "
                     f"| {_fmt([r.peak_rss_gb for r in runs[algo]], 1.0, 2)} |")
    lines += ["", "## Policy at the end (mean of the last 5 iterations)", "",
              "| algorithm | token entropy | invalid-action rate (%) |", "|---|---|---|"]
    for algo in algos:
        lines.append(f"| {algo} | {_fmt([r.final_entropy for r in runs[algo]], 1.0, 3)} "
                     f"| {_fmt([r.final_invalid for r in runs[algo]])} |")
    lines += ["", "## GiGPO vs GRPO", ""]
    if "gigpo" in runs and "grpo" in runs:
        lines.append(f"- Final success: {welch_test([r.final for r in runs['gigpo']], [r.final for r in runs['grpo']])}")
        lines.append("- Mean of the last 3 evaluations: "
                     f"{welch_test([r.final_smoothed for r in runs['gigpo']], [r.final_smoothed for r in runs['grpo']])}")
        ratio = efficiency_ratio(runs)
        if ratio:
            lines.append(f"- Sample efficiency: {ratio}")
    else:
        lines.append("Not both in this comparison.")
    curves = {a: [(r.steps, r.success) for r in rs] for a, rs in runs.items()}
    png = plot_comparison(curves, out / "curves.png")
    lines += ["", f"![learning curves]({png.name})", "", "Per-seed final success:", ""]
    for algo in algos:
        lines.append(f"- {algo}: " + ", ".join(f"seed {r.seed}: {r.final:.1%}" for r in runs[algo]))
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    (out / "runs.json").write_text(json.dumps({a: [r.__dict__ for r in rs] for a, rs in runs.items()}, indent=1))
    return report
