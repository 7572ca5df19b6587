"""`gigpo compare --shared-warmup` end to end: one warm-up for every run, and a report whose paired
statistics equal a hand computation from the runs' own metrics.jsonl."""
from __future__ import annotations

import gzip
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
from support.run import SMALL, gigpo
from scipy import stats

from gigpo.experiments.compare import format_p


def evals(run_dir: Path) -> list[float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["eval/success"] for r in records if "eval/success" in r]


def pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 100:+.1f}"


def expected_row(name: str, diffs: list[float]) -> str:
    """The report's row, computed here by hand: mean, t-interval and paired t-test of the differences."""
    d = np.round(np.asarray(diffs), 12)
    mean = d.mean()
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    if np.ptp(d) > 0:
        t = mean / (d.std(ddof=1) / math.sqrt(len(d)))
        t_cell, p_cell = f"{t:.2f}", f"{2 * stats.t.sf(abs(t), len(d) - 1):.3f}"
    else:
        t_cell = p_cell = "n/a"
    per_seed = ", ".join(f"s{s}: {pct(x)}" for s, x in enumerate(d))
    return (f"| {name} | {per_seed} | {pct(mean)} | [{pct(mean - half)}, {pct(mean + half)}] | {t_cell} | {p_cell} "
            f"| n/a |")   # two pairs: too few for the signed-rank test


def test_shared_warmup_paired_report_matches_a_hand_computation(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "cmp"
    cache = tmp_path / "cache"   # a private cache: the warm-up is built here, once
    shutil.copytree(tiny_model_dir, cache / "models" / tiny_model_dir.name)
    # rooms of one move and a warm-up long enough to solve some (about 25% here), a large learning rate so
    # two RL iterations move the greedy policy: the algorithms' evaluations can then differ
    gigpo("compare", "recipes/sokoban_tiny.yaml", *SMALL, "env.kwargs.solution_length=[1,1]", "env.eval_episodes=12",
          "trainer.sft_steps=40", "trainer.sft_rooms=20", "trainer.sft_batch_size=16", "trainer.lr=5e-3",
          "trainer.iterations=2", "trainer.eval_every=1", "--algos", "gigpo,grpo", "--seeds", "2",
          "--shared-warmup", "--warmup-seed", "7", "--parallel", "2", "--out", str(out), env={"GIGPO_CACHE": str(cache)})
    runs = [f"{a}-s{s}" for s in (0, 1) for a in ("gigpo", "grpo")]
    # one warm-up checkpoint: built by the first run alone (--parallel 2 holds the second back until the
    # first has logged its start), copied by the other three, byte for byte
    assert "warm-up: reusing" not in (out / runs[0] / "train.log").read_text()
    assert all("warm-up: reusing" in (out / r / "train.log").read_text() for r in runs[1:])
    weights = {(out / r / "warmup" / "hf" / "model.safetensors").read_bytes() for r in runs}
    assert len(weights) == 1 and len(list((cache / "warmups").iterdir())) == 1
    assert all("sft_seed: 7" in (out / r / "config.yaml").read_text() for r in runs)
    # the same start: every run's first evaluation is the shared warm-up's
    assert len({evals(out / r)[0] for r in runs}) == 1

    report = (out / "report.md").read_text()
    assert "one warm-up checkpoint shared by all 4 runs" in report
    assert "every algorithm draws the same task seeds in every iteration" in report
    curves = {r: evals(out / r) for r in runs}
    final = [curves[f"gigpo-s{s}"][-1] - curves[f"grpo-s{s}"][-1] for s in (0, 1)]
    last3 = [np.mean(curves[f"gigpo-s{s}"][1:][-3:]) - np.mean(curves[f"grpo-s{s}"][1:][-3:]) for s in (0, 1)]
    assert expected_row("final success", final) in report
    assert expected_row("mean of the last 3 evaluations", last3) in report
    # sample efficiency, seed by seed: grpo's final success as the target for gigpo's curve of the same seed
    for s in (0, 1):
        b = curves[f"grpo-s{s}"]
        if b[-1] <= b[0]:
            assert f"| {s} | {b[-1] * 100:.1f} |" in report and "ended at or below its start" in report
    # step groups over training, for both algorithms: two iterations fill the first two of four stretches,
    # each cell the mean over seeds of that iteration's revisit/multi_row_share
    for algo in ("gigpo", "grpo"):
        records = [[json.loads(line) for line in (out / f"{algo}-s{s}" / "metrics.jsonl").read_text().splitlines()]
                   for s in (0, 1)]
        cells = [f"{100 * np.mean([rs[i]['revisit/multi_row_share'] for rs in records]):.1f}" for i in (1, 2)]
        assert f"| {algo} | rows in step groups > 1 (%) | {cells[0]} | {cells[1]} | n/a | n/a |" in report
        invalid = [f"{100 * np.mean([rs[i]['rollout/invalid_action_rate'] for rs in records]):.1f}" for i in (1, 2)]
        assert f"| {algo} | invalid actions in training rollouts (%) | {invalid[0]} | {invalid[1]} | n/a | n/a |" in report
        signal = [f"{100 * np.mean([rs[i]['adv/step_signal_share'] for rs in records]):.1f}" for i in (1, 2)]
        assert f"| {algo} | rows with a step-level signal (%) | {signal[0]} | {signal[1]} | n/a | n/a |" in report
        assert algo == "gigpo" or signal == ["0.0", "0.0"]   # GRPO has no step part
        # sampled success of the training rollouts: with two iterations, first 5 and last 5 are both iterations 1-2
        sampled = [np.mean([r["rollout/success"] for r in rs if r.get("iteration", 0) >= 1]) for rs in records]
        cell = f"{100 * np.mean(sampled):.1f} ± {100 * np.std(sampled, ddof=1):.1f}"
        assert re.search(rf"\| {algo} \| [^|]+ \| [^|]+ \| {re.escape(cell)} \| {re.escape(cell)} \|", report), cell
    # room by room at the final evaluation, from the eval records: both, only gigpo, only grpo, neither, McNemar
    for s in (0, 1):
        won = {}
        for algo in ("gigpo", "grpo"):
            last = sorted((out / f"{algo}-s{s}" / "records").glob("*-eval.jsonl.gz"))[-1]
            assert last.name == "000002-eval.jsonl.gz"  # the last evaluation is recorded
            rows = [json.loads(line) for line in gzip.open(last, "rt")]
            won[algo] = {r["seed"]: r["won"] for r in rows if r["kind"] == "traj"}
            assert len(won[algo]) == 12 and np.mean(list(won[algo].values())) == curves[f"{algo}-s{s}"][-1]
        g, r = won["gigpo"], won["grpo"]
        only_g, only_r = sum(g[k] and not r[k] for k in g), sum(r[k] and not g[k] for k in g)
        both = sum(g[k] and r[k] for k in g)
        p = stats.binomtest(only_g, only_g + only_r).pvalue if only_g + only_r else 1.0
        assert f"| {s} | 2 | 12 | {both} | {only_g} | {only_r} | {12 - both - only_g - only_r} | {format_p(p)} |" in report
        # each run against its own start: the first record is iteration 0's, the shared warm-up's
        for algo in ("gigpo", "grpo"):
            first = sorted((out / f"{algo}-s{s}" / "records").glob("*-eval.jsonl.gz"))[0]
            assert first.name == "000000-eval.jsonl.gz"
            start = {r["seed"]: r["won"] for r in map(json.loads, gzip.open(first, "rt")) if r["kind"] == "traj"}
            end = won[algo]
            gained, lost = sum(end[k] and not start[k] for k in end), sum(start[k] and not end[k] for k in end)
            kept = sum(end[k] and start[k] for k in end)
            p = stats.binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
            assert f"| {algo} | {s} | 0-2 | {kept} | {gained} | {lost} | {format_p(p)} |" in report
    assert (out / "curves.png").stat().st_size > 0 and (out / "step_groups_gigpo.png").stat().st_size > 0
    print(f"final-success differences: {final}")
