"""`gigpo compare`: the same recipe under several algorithms and seeds, then one markdown report.

Each run is an ordinary `gigpo train` in its own run directory (`OUT/<algo>-s<seed>`). A run that
finished has `done.json`; an interrupted one is resumed from its checkpoint, so a comparison that was
stopped continues run by run. The report compares evaluation success against environment steps (the
cost that matters for agents), which is the x axis of the paper's sample-efficiency claim.

The paired design (`--shared-warmup`): every run starts from one warm-up checkpoint (`trainer.sft_seed`),
and seed k of every algorithm plays the same tasks in the same order (task seeds depend only on
trainer.seed and the iteration), so per-seed differences between two algorithms leave out the
variation between seeds. The report then gives paired statistics (gigpo.experiments.paired), learning curves with
95% bands, the env steps one algorithm needs to reach the other's final success, and how step groups
evolve over training.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from gigpo.experiments.paired import DIFF_DECIMALS
from gigpo.infra.cores import share_threads
from gigpo.trainer.metrics import read_metrics

SUCCESS_KEY = "eval/success"
TASK_TYPE_PREFIX = "eval/success/"   # one key per task type where an environment names them (ALFWorld)
STEPS_KEY = "rollout/env_steps_total"
LEVELS = (0.3, 0.5, 0.7, 0.9)
EFFICIENCY_TARGET = 0.7   # the target: GiGPO reaches GRPO's final success in 0.7x the env steps
PHASES = 4                # training is summarised in this many consecutive stretches of iterations
# (metrics key, report column, scale): state recurrence, logged for every estimator (gigpo.advantage.diagnostics)
REVISIT_COLUMNS = (("revisit/multi_row_share", "rows in step groups > 1 (%)", 100.0),
                   ("revisit/group_size_mean", "mean step-group size", 1.0),
                   ("revisit/size_p50", "row-weighted median size", 1.0),
                   ("revisit/size_p90", "row-weighted 90th pct. size", 1.0),
                   ("revisit/self_revisit_share", "rows revisiting own earlier state (%)", 100.0),
                   # which of those rows the estimator's step part reaches (0 for GRPO; n/a in runs before the metric)
                   ("adv/step_signal_share", "rows with a step-level signal (%)", 100.0),
                   # not recurrence, but read beside it: a policy that writes invalid moves stays in its state
                   ("rollout/invalid_action_rate", "invalid actions in training rollouts (%)", 100.0))
HISTOGRAM_KEYS = [f"adv/step_group_size/{k}" for k in range(1, 17)] + ["adv/step_group_size/gt16"]


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
    sampled_start: float = float("nan")   # success of the training rollouts (sampled), first 5 iterations
    sampled_end: float = float("nan")     # the same, last 5 iterations
    phase_diagnostics: Optional[dict[str, list[float]]] = None   # REVISIT_COLUMNS key -> mean per phase
    phase_histograms: Optional[list[list[float]]] = None         # GiGPO's step-group size shares per phase
    warmup_digest: Optional[str] = None                           # digest of the warm-up weights it started from
    task_types: Optional[dict[str, list[float]]] = None           # task type -> its eval success at each evaluation

    @property
    def final(self) -> float:
        return self.success[-1] if self.success else float("nan")

    @property
    def final_smoothed(self) -> float:
        """Mean of the last 3 evaluations after the start: one greedy evaluation can swing by many
        points when a small update flips the argmax in a state that every task passes through."""
        return last_three_mean(self.success)


def last_three_mean(success: Sequence[float]) -> float:
    """The mean of the last 3 of a run's evaluations after its first (its start), NaN with none after it."""
    late = list(success[1:])[-3:]
    return float(np.mean(late)) if late else float("nan")


def run_dir_for(out: Path, algo: str, seed: int) -> Path:
    return out / f"{algo}-s{seed}"


def parse_variant(text: str) -> tuple[str, str, list[str]]:
    """`NAME=ESTIMATOR [k=v ...]` -> (NAME, ESTIMATOR, overrides): an algorithm label with its own settings."""
    import shlex

    name, sep, rest = text.partition("=")
    parts = shlex.split(rest)
    if not sep or not name.strip() or not parts or "/" in name or any("=" not in o for o in parts[1:]):
        raise ValueError(f"--variant {text!r} must look like NAME=ESTIMATOR [section.key=value ...], "
                         f"e.g. --variant 'gigpo_mean=gigpo algorithm.norm=mean'")
    return name.strip(), parts[0], parts[1:]


def train_command(recipe: str, run_dir: Path, algo: str, seed: int, budget: Optional[int],
                  overrides: Sequence[str], variants: Optional[dict[str, tuple[str, list[str]]]] = None) -> list[str]:
    """The `gigpo train` of one run; `algo` is an estimator name or a label of `variants` (estimator, overrides)."""
    estimator, extra = (variants or {}).get(algo, (algo, []))
    cmd = [sys.executable, "-m", "gigpo.cli", "train", recipe, *overrides, *extra, f"algorithm.estimator={estimator}",
           f"trainer.seed={seed}", f"trainer.run_dir={run_dir}"]
    if budget:
        cmd.append(f"trainer.max_env_steps={budget}")
    if (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir()):
        cmd.append("--resume")
    return cmd


def shared_warmup_overrides(warmup_seed: Optional[int]) -> list[str]:
    """The override that gives every run one warm-up (the warm-up cache then holds one entry for all)."""
    return [] if warmup_seed is None else [f"trainer.sft_seed={warmup_seed}"]


def _warmup_ready(out: Path, algos: Sequence[str], seeds: Sequence[int]) -> bool:
    """A run of this comparison has logged its start (metrics.jsonl is written after the warm-up is in the cache)."""
    return any((run_dir_for(out, a, s) / "metrics.jsonl").is_file() for a in algos for s in seeds)


def run_all(recipe: str, out: Path, algos: Sequence[str], seeds: Sequence[int], budget: Optional[int],
            overrides: Sequence[str], parallel: int = 1, warmup_seed: Optional[int] = None,
            warm_up: bool = False, variants: Optional[dict[str, tuple[str, list[str]]]] = None) -> None:
    """Run every (algo, seed) not yet done; `parallel` runs at once, each logging to its own file.

    With `warmup_seed` every run gets `trainer.sft_seed=warmup_seed`. If the recipe warms up
    (`warm_up`), the first run then builds the shared warm-up alone and the others start once it has
    logged its start (by then the warm-up is in the cache), so all of them copy that one checkpoint
    instead of building it in parallel.
    """
    overrides = [*overrides, *shared_warmup_overrides(warmup_seed)]
    pending = [(a, s) for s in seeds for a in algos if not (run_dir_for(out, a, s) / "done.json").exists()]
    running: list[tuple[str, int, subprocess.Popen, Any]] = []
    total = len(algos) * len(seeds)
    print(f"compare: {total - len(pending)}/{total} runs already done, {len(pending)} to run", flush=True)
    child_env = dict(os.environ)
    if parallel > 1:  # share the cores instead of every run starting one thread per core
        share_threads(child_env, parallel)
    def hold() -> bool:  # a shared warm-up is being built by the one run started so far
        return warmup_seed is not None and warm_up and bool(running) and not _warmup_ready(out, algos, seeds)

    starts = StartCheck(out, algos, seeds)

    try:  # start runs as slots free up and wait for them
        while pending or running:
            while pending and len(running) < parallel and not hold():
                algo, seed = pending.pop(0)
                run_dir = run_dir_for(out, algo, seed)
                run_dir.mkdir(parents=True, exist_ok=True)
                log = (run_dir / "train.log").open("a")
                cmd = train_command(recipe, run_dir, algo, seed, budget, overrides, variants)
                print(f"compare: start {algo} seed {seed} -> {run_dir} (log: {run_dir / 'train.log'})", flush=True)
                running.append((algo, seed, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env),
                                log))
            time.sleep(1.0)
            for algo, seed, _, _ in running:
                starts.check(algo, seed)
            for item in list(running):
                algo, seed, proc, log = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                log.close()
                if proc.returncode != 0:
                    raise RunFailed(algo, seed, proc.returncode, run_dir_for(out, algo, seed) / "train.log")
                print(f"compare: done {algo} seed {seed}", flush=True)
    except BaseException:  # SIGTERM (gigpo.infra.stopping), Ctrl-C, or a failed run: no run may outlive compare
        _stop_runs(running)
        raise


class RunFailed(RuntimeError):
    """A run of a comparison exited non-zero; the message quotes its log's last line, which names the cause."""

    def __init__(self, algo: str, seed: int, code: int, log: Path) -> None:
        self.log = log
        lines = [l.strip() for l in log.read_text(errors="replace").splitlines() if l.strip()] if log.is_file() else []
        cause = f": {lines[-1][-400:]}" if lines else ""
        super().__init__(f"run {algo} seed {seed} failed with exit code {code}{cause}\n  its log: {log}; "
                         "finished runs are kept: fix the cause and rerun the same command to resume")


class UnpairedStart(RuntimeError):
    """A run of a comparison starts from other warm-up weights than the runs it is paired with."""


class StartCheck:
    """Stops a comparison whose pairs would not share their start: a run's warm-up weights (by digest) must equal
    those of the other algorithms' runs of its seed, the runs it is paired with.

    A warm-up rebuilt in another session can differ in its floats (other CPU kernels, another torch, changed
    code), and so in its start: a WebShop warm-up rebuilt on another machine started at 28.2% where its
    partners' had started at 23.1%. Paired differences then mix the two starts into the algorithms' effect, so
    the comparison stops as soon as the new run's warm-up is in place, not after an hour of RL. Seeds may differ in
    their warm-up (without --shared-warmup they do); the report's design section says how many there are."""

    def __init__(self, out: Path, algos: Sequence[str], seeds: Sequence[int]) -> None:
        self.out, self.algos, self.seeds = out, list(algos), list(seeds)
        self.known: dict[tuple[str, int], str] = {}
        for algo in self.algos:
            for seed in self.seeds:
                digest = warmup_digest(run_dir_for(out, algo, seed))
                if digest is not None:
                    self.known[(algo, seed)] = digest

    def check(self, algo: str, seed: int) -> None:
        """UnpairedStart when (algo, seed)'s warm-up, once in place, differs from a partner's; a no-op before."""
        if (algo, seed) in self.known or not (run_dir_for(self.out, algo, seed) / "warmup" / "hf").is_dir():
            return
        digest = warmup_digest(run_dir_for(self.out, algo, seed))
        if digest is None:
            return
        differ = {run: d for run, d in self.known.items() if run[1] == seed and d != digest}
        if differ:
            names = ", ".join(f"{a} seed {s} ({d})" for (a, s), d in sorted(differ.items()))
            raise UnpairedStart(
                f"{algo} seed {seed} starts from warm-up weights {digest}, but {names} started from other weights, so "
                f"their pairs would not share a start (a warm-up rebuilt in another session or on another machine can "
                f"differ in its floats). Continue in a new --out, or move those runs out of {self.out} so that they "
                "are run again from this warm-up")
        self.known[(algo, seed)] = digest


def _stop_runs(running: list) -> None:
    """SIGTERM each running `gigpo train` (it closes its engines and workers; checkpoints stay), then wait."""
    for _, _, proc, _ in running:
        if proc.poll() is None:
            proc.terminate()
    for algo, seed, proc, log in running:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            print(f"compare: run {algo} seed {seed} did not stop within 120 s of SIGTERM; killing it", flush=True)
            proc.kill()
            proc.wait()
        log.close()
    running.clear()


def load_run(out: Path, algo: str, seed: int) -> RunResult:
    records = read_metrics(run_dir_for(out, algo, seed))
    evals = [r for r in records if SUCCESS_KEY in r and STEPS_KEY in r]
    iter_times = [r["time/iteration"] for r in records if "time/iteration" in r]
    rss = [r["perf/peak_rss_gb"] for r in records if "perf/peak_rss_gb" in r]

    def tail_mean(key: str) -> float:
        values = [r[key] for r in records if isinstance(r.get(key), (int, float))][-5:]
        return float(np.mean(values)) if values else float("nan")

    trained = [r for r in records if r.get("iteration", 0) >= 1]
    # the rollouts' own success, at the rollout temperature: a greedy evaluation can fall while the sampled
    # policy holds (a deterministic policy that loops never leaves its loop; the maze of docs/results.md)
    sampled = [r["rollout/success"] for r in trained if isinstance(r.get("rollout/success"), (int, float))]
    sampled_start = float(np.mean(sampled[:5])) if sampled else float("nan")
    sampled_end = float(np.mean(sampled[-5:])) if sampled else float("nan")
    diagnostics = {key: phase_means(trained, key) for key, _, _ in REVISIT_COLUMNS}
    histograms = None
    if any(HISTOGRAM_KEYS[0] in r for r in trained):
        per_key = [phase_means(trained, key) for key in HISTOGRAM_KEYS]
        histograms = [[col[p] for col in per_key] for p in range(PHASES)]
    type_keys = sorted({k for r in evals for k in r if k.startswith(TASK_TYPE_PREFIX)})
    task_types = {k[len(TASK_TYPE_PREFIX):]: [float(r.get(k, float("nan"))) for r in evals] for k in type_keys}
    return RunResult(algo, seed, [float(r[STEPS_KEY]) for r in evals], [float(r[SUCCESS_KEY]) for r in evals],
                     float(np.mean(iter_times)) if iter_times else float("nan"), max(rss) if rss else float("nan"),
                     int(evals[-1].get("eval/episodes", 0)) if evals else 0,
                     tail_mean("loss/entropy"), tail_mean("rollout/invalid_action_rate"), sampled_start, sampled_end,
                     diagnostics, histograms, warmup_digest(run_dir_for(out, algo, seed)), task_types or None)


def phase_means(records: Sequence[dict[str, Any]], key: str, phases: int = PHASES) -> list[float]:
    """Mean of `key` over each of `phases` consecutive, equal stretches of the records that carry it."""
    values = [float(r[key]) for r in records if isinstance(r.get(key), (int, float))]
    if not values:
        return [float("nan")] * phases
    return [float(np.mean(chunk)) if len(chunk) else float("nan") for chunk in np.array_split(values, phases)]


WARMUP_DIGEST_FILE = "weights.digest"


def warmup_digest(run_dir: Path) -> Optional[str]:
    """A short digest of the run's warm-up weights (None without a warm-up): equal digests, equal start.

    A run's record copied without its weights (docs/results) keeps the digest in `warmup/weights.digest`."""
    weights = sorted((run_dir / "warmup" / "hf").glob("*.safetensors"))
    if not weights:
        kept = run_dir / "warmup" / WARMUP_DIGEST_FILE
        return kept.read_text().strip() if kept.is_file() else None
    digest = hashlib.blake2b(digest_size=8)
    for path in weights:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def task_seed_check(out: Path, algos: Sequence[str], seeds: Sequence[int]) -> str:
    """Whether seed k of every algorithm drew the same task seeds in every iteration, from the runs' configs."""
    from gigpo.config import build_config
    from gigpo.infra.seeds import train_seeds

    import yaml

    differ = []
    for seed in seeds:
        schedules = {}
        for algo in algos:
            path = run_dir_for(out, algo, seed) / "config.yaml"
            if not path.is_file():
                continue
            cfg = build_config(yaml.safe_load(path.read_text()), str(path))
            schedules[algo] = [train_seeds(cfg, i, d) for i in range(1, cfg.trainer.iterations + 1)
                               for d in range(cfg.algorithm.max_resample + 1)]
        if len({json.dumps(v) for v in schedules.values()}) > 1:
            differ.append(seed)
    if differ:
        return f"task seeds differ between algorithms for seed(s) {', '.join(map(str, differ))}: not a paired design"
    return ("every algorithm draws the same task seeds in every iteration for a given seed "
            "(checked from each run's config.yaml, dynamic sampling's re-draws included)")


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
    with warnings.catch_warnings():
        # success rates are multiples of 1/episodes, so one side's seeds often end equal: scipy then warns of
        # precision loss, yet Welch's t is exact from the other side's spread
        warnings.filterwarnings("ignore", message="Precision loss occurred in moment calculation")
        res = stats.ttest_ind(a, b, equal_var=False)
    return f"Welch t = {res.statistic:.2f}, p = {format_p(res.pvalue)} (n = {len(a)} vs {len(b)} seeds)"


def efficiency_ratio(runs: dict[str, list[RunResult]], fast: str = "gigpo", slow: str = "grpo") -> Optional[str]:
    """Env steps `fast` needed to reach `slow`'s final mean success, as a share of `slow`'s whole run and of
    the steps `slow`'s own seeds needed to first reach it (the fair cost where `slow` plateaued early)."""
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
    text = (f"{fast} reached {slow}'s final mean success ({target:.1%}) after {np.mean(reach):,.0f} env steps "
            f"on average: {ratio:.2f}x of {slow}'s {slow_steps:,.0f}")
    # a baseline that plateaued spent the rest of its run at the target: its whole run overstates its cost
    own = [steps_to_reach(r, target) for r in runs[slow]]
    if any(math.isnan(x) for x in own):
        return text + (f"; {slow} itself reached it in {sum(not math.isnan(x) for x in own)}/{len(own)} seeds, so "
                       "there is no ratio to its own first reach")
    return text + (f", and {float(np.mean(reach)) / float(np.mean(own)):.2f}x of the {np.mean(own):,.0f} {slow} "
                   "needed to first reach it")


def _pct(x: float, digits: int = 1, signed: bool = False) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x * 100:{'+' if signed else ''}.{digits}f}"


def format_p(x: Optional[float]) -> str:
    """A p-value to three decimals, or in scientific notation below 0.001: rooms paired over hundreds of
    held-out seeds give McNemar p-values like 3e-20, which three decimals would print as 0.000."""
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"


def paired_efficiency(fast: Sequence[RunResult], slow: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per seed: env steps `fast` needed to reach `slow`'s final success of the same seed, and the ratio to
    `slow`'s whole run ("ratio") and to `slow`'s own first reach of that level ("ratio_own").

    The two differ where `slow` plateaued before its end: at a ceiling both may reach the final level at the
    same evaluation, and only "ratio_own" says so. A seed whose `slow` run ended at or below its start has no
    gain to compare costs for (ratios nan); a `fast` run that never reached the target has reach nan.
    """
    by_seed = {r.seed: r for r in slow}
    rows = []
    for f in fast:
        b = by_seed.get(f.seed)
        if b is None or not b.success or not f.success:
            continue
        gained = b.final > b.success[0]
        reach = steps_to_reach(f, b.final) if gained else float("nan")
        own = steps_to_reach(b, b.final) if gained else float("nan")
        rows.append({"seed": f.seed, "target": b.final, "slow_steps": b.steps[-1], "gained": gained,
                     "reach": reach, "ratio": reach / b.steps[-1] if gained and b.steps[-1] else float("nan"),
                     "slow_reach": own, "ratio_own": reach / own if gained and own else float("nan")})
    return rows


def mean_curve_efficiency(fast: Sequence[RunResult], slow: Sequence[RunResult]) -> Optional[dict[str, float]]:
    """Where the mean curve of `fast` first reaches the mean final success of `slow`.

    Each seed's curve is linear between its evaluations, so their mean is linear between the union of all
    seeds' evaluation points: the crossing is found exactly there. (A fixed grid missed a curve that touches
    the target at one evaluation and dips after it, as a plateau at a ceiling does.)"""
    curves = [(np.asarray(r.steps, dtype=np.float64), np.asarray(r.success, dtype=np.float64)) for r in fast if r.steps]
    if not curves or len(curves) < len(fast) or not slow:
        return None
    end = min(xs[-1] for xs, _ in curves)
    knots = np.unique(np.concatenate([xs[xs <= end] for xs, _ in curves]))
    # success rates are multiples of 1/episodes: rounding drops the float noise of the mean, so a curve that
    # ends exactly on the target is seen to reach it
    mean = np.round(np.mean([np.interp(knots, xs, ys) for xs, ys in curves], axis=0), DIFF_DECIMALS)
    target = float(np.round(np.mean([r.final for r in slow]), DIFF_DECIMALS))
    if target <= float(np.mean([r.success[0] for r in slow if r.success])):
        return {"target": target, "reach": float("nan"), "slow_steps": float("nan"), "ratio": float("nan"),
                "no_gain": 1.0}
    slow_steps = float(np.mean([r.steps[-1] for r in slow if r.steps]))
    hit = np.flatnonzero(mean >= target)
    if not hit.size:
        reach = float("nan")
    elif hit[0] == 0:
        reach = float(knots[0])
    else:  # the mean curve is linear between the two knots around the crossing
        i = hit[0]
        reach = float(knots[i - 1] + (target - mean[i - 1]) / (mean[i] - mean[i - 1]) * (knots[i] - knots[i - 1]))
    return {"target": target, "reach": reach, "slow_steps": slow_steps, "ratio": reach / slow_steps}


def paired_section(runs: dict[str, list[RunResult]], pair: tuple[str, str]) -> list[str]:
    """The report's paired statistics for `pair[0] - pair[1]`, seed by seed."""
    from gigpo.experiments.paired import WILCOXON_MIN_PAIRS, paired_stats

    a, b = pair
    lines = [f"## Paired: {a} - {b} (seed k against seed k)", ""]
    if a not in runs or b not in runs:
        return lines + [f"Not both of {a} and {b} in this comparison.", ""]
    measures = (("final success", lambda r: r.final), ("mean of the last 3 evaluations", lambda r: r.final_smoothed))
    lines += ["Differences in points of success; CI: mean ± t·s/√n (95%); paired t-test: scipy.stats.ttest_rel; "
              f"Wilcoxon signed-rank (two-sided, scipy.stats.wilcoxon), given only when at least {WILCOXON_MIN_PAIRS} "
              "differences are non-zero (with n pairs its p-value cannot go below 2/2^n).", "",
              "| measure | per-seed differences | mean | 95% CI | paired t | p (t-test) | p (Wilcoxon) |",
              "|---|---|---|---|---|---|---|"]
    for name, value in measures:
        st = paired_stats({r.seed: value(r) for r in runs[a]}, {r.seed: value(r) for r in runs[b]})
        diffs = ", ".join(f"s{seed}: {_pct(d, signed=True)}" for seed, d in zip(st.seeds, st.diffs)) or "none"
        ci = f"[{_pct(st.ci_low, signed=True)}, {_pct(st.ci_high, signed=True)}]"
        t_cell = "n/a" if math.isnan(st.t) else f"{st.t:.2f}"
        lines.append(f"| {name} | {diffs} | {_pct(st.mean, signed=True)} | {ci} | {t_cell} | {format_p(st.p_t)} "
                     f"| {format_p(st.p_wilcoxon)} |")
    lines += ["", f"### Env steps for {a} to reach {b}'s final success (target: {EFFICIENCY_TARGET}x or less)", "",
              f"| seed | {b} final | {b} env steps | {a} env steps to reach it | ratio | {b}'s own first reach of it "
              "| ratio to that |", "|---|---|---|---|---|---|---|"]
    per_seed = paired_efficiency(runs[a], runs[b])
    for row in per_seed:
        if not row["gained"]:
            reach, ratio, own, ratio_own = f"n/a ({b} ended at or below its start)", "n/a", "n/a", "n/a"
        else:
            own = f"{row['slow_reach']:,.0f}"
            if math.isnan(row["reach"]):
                reach, ratio, ratio_own = "not reached", "n/a", "n/a"
            else:
                reach, ratio, ratio_own = f"{row['reach']:,.0f}", f"{row['ratio']:.2f}x", f"{row['ratio_own']:.2f}x"
        lines.append(f"| {row['seed']} | {_pct(row['target'])} | {row['slow_steps']:,.0f} | {reach} | {ratio} "
                     f"| {own} | {ratio_own} |")
    ratios = [row["ratio"] for row in per_seed if not math.isnan(row["ratio"])]
    met = sum(x <= EFFICIENCY_TARGET for x in ratios)
    lines += ["", f"- Per seed: {len(ratios)}/{len(per_seed)} seeds have a ratio"
              + (f", median {np.median(ratios):.2f}x; {met} of them at or below {EFFICIENCY_TARGET}x" if ratios else "")
              + "."]
    own_ratios = [row["ratio_own"] for row in per_seed if not math.isnan(row["ratio_own"])]
    if own_ratios:
        lines.append(f"- Against {b}'s own first reach of its final success (where {b} plateaued before its end, "
                     f"the fairer cost): median {np.median(own_ratios):.2f}x over {len(own_ratios)} seeds.")
    overall = mean_curve_efficiency(runs[a], runs[b])
    if overall is not None:
        if overall.get("no_gain"):
            lines.append(f"- Mean curves: {b}'s mean final success ({_pct(overall['target'])}%) is not above its mean "
                         "start: no gain whose cost could be compared.")
        elif math.isnan(overall["reach"]):
            lines.append(f"- Mean curves: {a}'s mean curve never reached {b}'s mean final success "
                         f"({_pct(overall['target'])}%).")
        else:
            verdict = "met" if overall["ratio"] <= EFFICIENCY_TARGET else "not met"
            own = mean_curve_efficiency(runs[b], runs[b])  # where b's own mean curve first reached its mean final
            own_text = (f"; {overall['reach'] / own['reach']:.2f}x the {own['reach']:,.0f} at which {b}'s own mean "
                        "curve first reached it" if own and not math.isnan(own["reach"]) and own["reach"] > 0 else "")
            lines.append(f"- Mean curves: {a}'s mean curve reached {b}'s mean final success ({_pct(overall['target'])}%) "
                         f"at {overall['reach']:,.0f} env steps, {overall['ratio']:.2f}x {b}'s {overall['slow_steps']:,.0f} "
                         f"(target {EFFICIENCY_TARGET}x: {verdict}){own_text}.")
    ratio = efficiency_ratio(runs, a, b)
    if ratio:
        lines.append(f"- Mean over seeds of the steps to reach {b}'s mean final success: {ratio}")
    return lines + [""]


def heldout_section(out: Path, pair: tuple[str, str], seeds: Sequence[int]) -> list[str]:
    """Seed k of `pair`'s two algorithms, task by task at their final evaluations (gigpo/experiments/heldout.py)."""
    from gigpo.experiments.heldout import final_eval_tasks, first_eval_tasks, task_agreement

    a, b = pair
    lines = [f"## Held-out tasks at the final evaluation: {a} vs {b}", "",
             "Seed k of both evaluates the same held-out tasks (rooms, games, instructions: env seeds); the tasks "
             "only one of them won carry the whole difference (McNemar: exact two-sided binomial test of those "
             "counts, scipy.stats.binomtest). Read from each run's last evaluation record.", "",
             f"| seed | iteration | tasks | both won | only {a} | only {b} | neither | p (McNemar) |",
             "|---|---|---|---|---|---|---|---|"]
    for seed in seeds:
        ra, rb = final_eval_tasks(run_dir_for(out, a, seed)), final_eval_tasks(run_dir_for(out, b, seed))
        if ra is None or rb is None or ra.iteration != rb.iteration:
            why = "no evaluation record" if ra is None or rb is None else f"records of iterations {ra.iteration} and {rb.iteration}"
            lines.append(f"| {seed} | n/a ({why}) | | | | | | |")
            continue
        ag = task_agreement(ra.won, rb.won)
        lines.append(f"| {seed} | {ra.iteration} | {ag.tasks} | {ag.both} | {ag.only_a} | {ag.only_b} | {ag.neither} "
                     f"| {format_p(ag.p_mcnemar)} |")
    lines += ["", "Each run's last evaluation against its own first (its start, the same tasks): a run that learns keeps "
              "the tasks it started with and gains others; one that drifts gains and loses alike.", "",
              "| algorithm | seed | iterations | won at both | gained | lost | p (McNemar) |", "|---|---|---|---|---|---|---|"]
    for algo in pair:
        for seed in seeds:
            run_dir = run_dir_for(out, algo, seed)
            start, end = first_eval_tasks(run_dir), final_eval_tasks(run_dir)
            if start is None or end is None or start.iteration == end.iteration:
                lines.append(f"| {algo} | {seed} | n/a (fewer than two evaluation records) | | | | |")
                continue
            ag = task_agreement(end.won, start.won)
            lines.append(f"| {algo} | {seed} | {start.iteration}-{end.iteration} | {ag.both} | {ag.only_a} | {ag.only_b} "
                         f"| {format_p(ag.p_mcnemar)} |")
    return lines + [""]


def task_type_section(runs: dict[str, list[RunResult]], algos: Sequence[str]) -> list[str]:
    """Start and end per task type, where the runs' evaluations name task types: an average over types can hide
    one type learned and another lost, and a subset's types start far apart (ALFWorld's look-at and pick-and-place)."""
    types = sorted({t for algo in algos for r in runs[algo] for t in (r.task_types or {})})
    if not types:
        return []
    lines = ["## Success per task type", "",
             "Each run's evaluations split by the task type of their episodes; start is the first evaluation, end the "
             "mean of the last 3 after it, change is end - start within each run; mean ± std over seeds, in percent.",
             "", "| algorithm | task type | start | end (last 3 evaluations) | change |", "|---|---|---|---|---|"]
    for algo in algos:
        for t in types:
            curves = [(r.task_types or {}).get(t, []) for r in runs[algo]]
            starts = [c[0] if c else float("nan") for c in curves]
            ends = [last_three_mean(c) for c in curves]
            lines.append(f"| {algo} | {t} | {_fmt(starts)} | {_fmt(ends)} "
                         f"| {_fmt([e - s for s, e in zip(starts, ends)])} |")
    return lines + [""]


def design_section(out: Path, runs: dict[str, list[RunResult]], algos: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """What the runs share: the warm-up checkpoint (by digest) and the task seeds per iteration."""
    digests = {r.warmup_digest for rs in runs.values() for r in rs}
    n_runs = sum(len(rs) for rs in runs.values())
    if digests == {None}:
        warm = "no warm-up (every run starts from the same model weights)"
    elif len(digests) == 1:
        warm = f"one warm-up checkpoint shared by all {n_runs} runs (weights digest {digests.pop()})"
    else:
        per_seed = {s: {r.warmup_digest for rs in runs.values() for r in rs if r.seed == s} for s in seeds}
        same_within = all(len(d) == 1 for d in per_seed.values())
        warm = (f"{len(digests)} different warm-ups: " + ("one per seed, shared by the algorithms of that seed; seeds "
                "then differ in their start as well as in RL (use --shared-warmup for one start)" if same_within else
                "they differ even between the algorithms of one seed"))
    artifact = artifact_check(out, algos, seeds)
    return ["## Design", "", f"- Warm-up: {warm}.", *([f"- Warm-up artifact: {artifact}."] if artifact else []),
            f"- Tasks: {task_seed_check(out, algos, seeds)}.", ""]


def artifact_check(out: Path, algos: Sequence[str], seeds: Sequence[int]) -> Optional[str]:
    """The saved warm-up (trainer.sft_artifact) the runs named in their config.yaml, if any: each run checked its
    copy's sha256 against it before starting, so one named digest means one start on whatever machine ran it."""
    import yaml

    named = set()
    for algo in algos:
        for seed in seeds:
            path = run_dir_for(out, algo, seed) / "config.yaml"
            if path.is_file():
                trainer = (yaml.safe_load(path.read_text()) or {}).get("trainer", {})
                named.add((trainer.get("sft_artifact"), trainer.get("sft_artifact_sha256")))
    if named <= {(None, None)}:
        return None
    if len(named) == 1:
        folder, digest = named.pop()
        return f"{folder} (sha256 {digest}), checked by every run against its copy before it started"
    return (f"{len(named)} different warm-up artifacts (or none) among the runs: "
            + "; ".join(sorted(f"{f} ({(d or '-')[:16]})" for f, d in named)) + ": not one start")


def revisit_section(runs: dict[str, list[RunResult]], algos: Sequence[str], out: Path, prefix: str = "") -> list[str]:
    """State recurrence over training: per algorithm, each REVISIT_COLUMNS value per phase (mean over seeds)."""
    from gigpo.experiments.plots import plot_size_histograms

    phase_names = [f"{100 * p // PHASES}-{100 * (p + 1) // PHASES}%" for p in range(PHASES)]
    lines = ["## Step groups over training", "",
             f"Training iterations are cut into {PHASES} equal stretches; each cell is the mean over the stretch's "
             "iterations, then over seeds. Step groups here are the exact-anchor groups inside each task group, "
             "counted for every algorithm (`revisit/` metrics), so the columns compare how much the policies "
             "revisit states, not only GiGPO's. Sizes are per row. \"rows with a step-level signal\" is the share "
             "whose step part is not 0 (`adv/step_signal_share`), the estimator's own. The last row per algorithm is "
             "the share of invalid actions in its training rollouts.", "",
             "| algorithm | measure | " + " | ".join(phase_names) + " |", "|---|---|" + "---|" * PHASES]
    for algo in algos:
        for key, title, scale in REVISIT_COLUMNS:
            per_seed = [r.phase_diagnostics[key] for r in runs[algo] if r.phase_diagnostics]
            cells = []
            for p in range(PHASES):
                vals = [v[p] for v in per_seed if not math.isnan(v[p])]
                cells.append(f"{np.mean(vals) * scale:.{1 if scale > 1 else 2}f}" if vals else "n/a")
            lines.append(f"| {algo} | {title} | " + " | ".join(cells) + " |")
    hists = {a: [r.phase_histograms for r in runs[a] if r.phase_histograms] for a in algos}
    hists = {a: h for a, h in hists.items() if h and not all(np.nansum(x[0][1:]) == 0 for x in h)}  # GiGPO-like only
    for algo, per_seed in hists.items():
        mean = np.nanmean(np.asarray(per_seed, dtype=np.float64), axis=0)   # (phases, sizes)
        labels = [str(k) for k in range(1, 17)] + [">16"]
        png = plot_size_histograms({name: mean[p].tolist() for p, name in enumerate(phase_names)}, labels,
                                   out / f"{prefix}step_groups_{algo}.png", f"{algo}: step-group sizes (share of groups)")
        lines += ["", f"{algo}'s step-group size distribution (share of step groups of each size, mean over seeds):", "",
                  "| stretch | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for p, name in enumerate(phase_names):
            lines.append(f"| {name} | " + " | ".join("n/a" if math.isnan(v) else f"{v * 100:.0f}" for v in mean[p]) + " |")
        lines += ["", f"![{algo} step-group sizes]({png.name})"]
    return lines + [""]


def _standard_error_note(runs: dict[str, list[RunResult]]) -> str:
    counts = [r.eval_episodes for rs in runs.values() for r in rs if r.eval_episodes]
    if not counts:
        return ""
    n = min(counts)
    return (f" Each evaluation plays {n} episodes: the standard error of one success rate is at most "
            f"{50 / math.sqrt(n):.1f} points (at 50%).")


def write_report(out: Path, recipe: str, algos: Sequence[str], seeds: Sequence[int], command: str,
                 pair: tuple[str, str] = ("gigpo", "grpo"), name: str = "report") -> Path:
    """OUT/<name>.md with its figures (`curves.png` and `step_groups_<algo>.png` for the default name,
    else prefixed with `<name>_`), so several reports over subsets of one comparison's runs can coexist."""
    from gigpo.experiments.plots import plot_comparison

    runs = {a: [load_run(out, a, s) for s in seeds] for a in algos}
    max_steps = min((r.steps[-1] for rs in runs.values() for r in rs if r.steps), default=0.0)
    budgets = [max_steps * f for f in (0.25, 0.5, 0.75, 1.0)] if max_steps else []
    lines = [f"# Comparison on `{recipe}`", "", f"Command: `{command}`", "",
             f"Seeds: {', '.join(map(str, seeds))}. Success is greedy evaluation on held-out seeds, "
             "mean ± std over seeds, in percent." + _standard_error_note(runs), ""]
    lines += design_section(out, runs, algos, seeds)
    lines += paired_section(runs, pair)
    if pair[0] in runs and pair[1] in runs:
        lines += heldout_section(out, pair, seeds)
    lines += ["## Success at environment-step budgets", "",
              "| algorithm | start | " + " | ".join(f"{b:,.0f} steps" for b in budgets) + " | final | last 3 evaluations |",
              "|---|" + "---|" * (len(budgets) + 3)]
    for algo in algos:
        cells = [_fmt([success_at(r, b) for r in runs[algo]]) for b in budgets]
        start = _fmt([r.success[0] if r.success else float("nan") for r in runs[algo]])
        lines.append(f"| {algo} | {start} | " + " | ".join(cells) + f" | {_fmt([r.final for r in runs[algo]])} "
                     f"| {_fmt([r.final_smoothed for r in runs[algo]])} |")
    lines += [""] + task_type_section(runs, algos)
    lines += ["## Environment steps to reach a success level", "",
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
              "Sampled success is the training rollouts' own (at the rollout temperature): when it holds while the "
              "greedy evaluation falls, the greedy policy is stuck in loops the sampled one leaves.", "",
              "| algorithm | token entropy | invalid-action rate (%) | sampled success, first 5 iterations (%) "
              "| sampled success, last 5 iterations (%) |", "|---|---|---|---|---|"]
    for algo in algos:
        lines.append(f"| {algo} | {_fmt([r.final_entropy for r in runs[algo]], 1.0, 3)} "
                     f"| {_fmt([r.final_invalid for r in runs[algo]])} | {_fmt([r.sampled_start for r in runs[algo]])} "
                     f"| {_fmt([r.sampled_end for r in runs[algo]])} |")
    a, b = pair
    lines += ["", f"## {a} vs {b}, unpaired (Welch)", ""]
    if a in runs and b in runs:
        lines.append(f"- Final success: {welch_test([r.final for r in runs[a]], [r.final for r in runs[b]])}")
        lines.append("- Mean of the last 3 evaluations: "
                     f"{welch_test([r.final_smoothed for r in runs[a]], [r.final_smoothed for r in runs[b]])}")
    else:
        lines.append("Not both in this comparison.")
    prefix = "" if name == "report" else f"{name}_"
    lines += [""] + revisit_section(runs, algos, out, prefix)
    curves = {a: [(r.steps, r.success) for r in rs] for a, rs in runs.items()}
    png = plot_comparison(curves, out / f"{prefix}curves.png", paired=pair if a in runs and b in runs else None)
    lines += ["", f"![learning curves]({png.name})", "", "Per-seed final success:", ""]
    for algo in algos:
        lines.append(f"- {algo}: " + ", ".join(f"seed {r.seed}: {r.final:.1%}" for r in runs[algo]))
    report = out / f"{name}.md"
    report.write_text("\n".join(lines) + "\n")
    (out / f"{prefix}runs.json").write_text(json.dumps({a: [r.__dict__ for r in rs] for a, rs in runs.items()}, indent=1))
    return report
