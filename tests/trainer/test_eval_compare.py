"""`gigpo eval` on a checkpoint and `gigpo compare` with a small budget, as a user runs them."""
from __future__ import annotations

import json
from pathlib import Path

from run_helpers import SMALL, gigpo


def test_compare_writes_report_and_curves_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "recipes/sokoban_tiny.yaml", *SMALL, "trainer.iterations=3", "trainer.eval_every=1",
            "--algos", "gigpo,grpo", "--seeds", "2", "--budget", "12", "--out", str(out)]
    first = gigpo(*args)
    report = (out / "report.md").read_text()
    assert "| gigpo |" in report and "| grpo |" in report and "Welch t" in report
    assert (out / "curves.png").stat().st_size > 0
    for run in ("gigpo-s0", "gigpo-s1", "grpo-s0", "grpo-s1"):
        records = [json.loads(l) for l in (out / run / "metrics.jsonl").read_text().splitlines()]
        # the budget stops a run once 12 env steps are reached (12 per iteration here): after iteration 1
        assert max(r["iteration"] for r in records) == 1
        assert records[-1]["rollout/env_steps_total"] >= 12
    assert "4 to run" in first.stdout
    again = gigpo(*args)  # every run is done: nothing reruns, the report is rebuilt
    assert "4/4 runs already done" in again.stdout


def test_eval_scores_a_checkpoint_on_held_out_seeds(tmp_path: Path) -> None:
    run = tmp_path / "run"
    gigpo("train", "recipes/sokoban_tiny.yaml", *SMALL, "trainer.iterations=1", f"trainer.run_dir={run}")
    proc = gigpo("eval", "recipes/sokoban_tiny.yaml", *SMALL, "--checkpoint", str(run / "checkpoints" / "1" / "hf"),
                 "--episodes", "3")
    assert "on 3 held-out episodes" in proc.stdout and "eval/success" in proc.stdout
