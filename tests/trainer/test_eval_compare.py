"""`gigpo eval` on a checkpoint and `gigpo compare` with a small budget, as a user runs them."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from support.run import REPO, SMALL, clean_env, gigpo


def test_compare_writes_report_and_curves_and_resumes(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "cmp"
    # a private cache holding only the tiny model, so the warm-ups below are built here, not found
    cache = tmp_path / "cache"
    shutil.copytree(tiny_model_dir, cache / "models" / tiny_model_dir.name)
    args = ["compare", "recipes/sokoban_tiny.yaml", *SMALL, "trainer.iterations=3", "trainer.eval_every=2",
            "trainer.sft_steps=2", "trainer.sft_rooms=3", "trainer.sft_batch_size=4",
            "--algos", "gigpo,grpo", "--seeds", "2", "--budget", "12", "--out", str(out)]
    first = gigpo(*args, env={"GIGPO_CACHE": str(cache)})
    report = (out / "report.md").read_text()
    assert "| gigpo |" in report and "| grpo |" in report and "Welch t" in report
    assert (out / "curves.png").stat().st_size > 0
    for run in ("gigpo-s0", "gigpo-s1", "grpo-s0", "grpo-s1"):
        records = [json.loads(l) for l in (out / run / "metrics.jsonl").read_text().splitlines()]
        # the budget stops a run once 12 env steps are reached (12 per iteration here): after iteration 1
        assert max(r["iteration"] for r in records) == 1
        assert records[-1]["rollout/env_steps_total"] >= 12
        # the run stopped by its budget evaluates and saves its final policy (eval_every=2 would skip 1)
        assert "eval/success" in records[-1] and (out / run / "checkpoints" / "1" / "hf").is_dir()
    assert "4 to run" in first.stdout
    # runs of one seed share a warm-up: the second algorithm copies the first one's, seeds differ
    for seed in (0, 1):
        assert "warm-up: reusing" not in (out / f"gigpo-s{seed}" / "train.log").read_text()
        assert "warm-up: reusing" in (out / f"grpo-s{seed}" / "train.log").read_text()
        weights = [(out / f"{algo}-s{seed}" / "warmup" / "hf" / "model.safetensors").read_bytes() for algo in ("gigpo", "grpo")]
        assert weights[0] == weights[1]
    assert (out / "gigpo-s0" / "warmup" / "hf" / "model.safetensors").read_bytes() != \
        (out / "gigpo-s1" / "warmup" / "hf" / "model.safetensors").read_bytes()
    again = gigpo(*args)  # every run is done: nothing reruns, the report is rebuilt
    assert "4/4 runs already done" in again.stdout


def test_eval_scores_a_checkpoint_on_held_out_seeds(tmp_path: Path) -> None:
    run = tmp_path / "run"
    gigpo("train", "recipes/sokoban_tiny.yaml", *SMALL, "trainer.iterations=1", f"trainer.run_dir={run}")
    proc = gigpo("eval", "recipes/sokoban_tiny.yaml", *SMALL, "--checkpoint", str(run / "checkpoints" / "1" / "hf"),
                 "--episodes", "3")
    assert "on 3 held-out episodes" in proc.stdout and "eval/success" in proc.stdout


def test_compare_stops_when_a_run_would_not_share_its_partners_start(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A finished run recorded from another session's warm-up (a record in docs/results keeps the digest of its
    warm-up weights, not the weights): its partner, run here, builds a warm-up whose floats differ. Compare stops
    once that warm-up is in place, naming both, instead of pairing two starts for an hour of RL."""
    out = tmp_path / "cmp"
    cache = tmp_path / "cache"
    shutil.copytree(tiny_model_dir, cache / "models" / tiny_model_dir.name)
    recorded = out / "grpo-s0"
    (recorded / "warmup").mkdir(parents=True)
    (recorded / "warmup" / "weights.digest").write_text("0123456789abcdef\n")
    (recorded / "done.json").write_text("{}")
    cmd = [sys.executable, "-m", "gigpo.cli", "compare", "recipes/sokoban_tiny.yaml", *SMALL, "trainer.iterations=30",
           "trainer.sft_steps=2", "trainer.sft_rooms=3", "trainer.sft_batch_size=4",
           "--algos", "gigpo,grpo", "--seeds", "1", "--shared-warmup", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**clean_env(), "GIGPO_CACHE": str(cache)})
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "gigpo: compare stopped: gigpo seed 0 starts from warm-up weights" in proc.stderr, proc.stderr[-2000:]
    assert "grpo seed 0 (0123456789abcdef) started from other weights" in proc.stderr
    ran = out / "gigpo-s0"
    assert (ran / "warmup" / "hf").is_dir() and not (ran / "done.json").exists()  # stopped, not run to its end
    records = [json.loads(line) for line in (ran / "metrics.jsonl").read_text().splitlines()] \
        if (ran / "metrics.jsonl").is_file() else []
    assert all(r["iteration"] < 30 for r in records)


def test_compare_names_a_failed_runs_cause_without_a_traceback(tmp_path: Path) -> None:
    """A run that fails (here: a model directory that is not there) stops compare with the run's own error,
    read from its log, and exit code 1; the missing directory is named before any model or process starts."""
    missing = tmp_path / "no-such-model"
    out = tmp_path / "cmp"
    cmd = [sys.executable, "-m", "gigpo.cli", "compare", "recipes/sokoban_tiny.yaml", *SMALL, f"model.path={missing}",
           "--algos", "gigpo,grpo", "--seeds", "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=clean_env())
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "gigpo: compare stopped: run gigpo seed 0 failed with exit code 2" in proc.stderr, proc.stderr[-2000:]
    assert f"model.path={str(missing)!r}: no such directory" in proc.stderr
    assert str(out / "gigpo-s0" / "train.log") in proc.stderr
    assert not (out / "grpo-s0").exists()  # the comparison stopped at its first failure
