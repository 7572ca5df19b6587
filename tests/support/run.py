"""Shared by the end-to-end trainer tests: a shrunk Sokoban run and a `gigpo` subprocess runner."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT", "CROSS_RANK", "CROSS_SIZE")


def clean_env() -> dict[str, str]:
    """This process's environment without the rank variables that in-process engine tests set, so a
    child `gigpo train` starts as a fresh single process instead of joining a stale process group."""
    return {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}

REPO = Path(__file__).resolve().parents[2]
SMALL = ["env.num_groups=2", "env.group_size=2", "env.max_steps=3", "env.eval_episodes=2",
         "env.workers=1", "trainer.sft_steps=0", "trainer.micro_token_budget=2048", "trainer.mini_batch_size=64",
         "logging.wandb_mode=disabled", "logging.progress=false", "rollout.max_new_tokens=8"]
REQUIRED_KEYS = {"rollout/success", "rollout/return", "rollout/episode_length", "rollout/invalid_action_rate",
                 "rollout/tokens_generated", "rollout/env_steps_total", "adv/advantage_mean", "adv/step_groups",
                 "loss/entropy", "loss/clip_frac", "actor/grad_norm", "time/rollout", "time/env",
                 "time/logprobs", "time/advantage", "time/update", "time/sync", "time/iteration", "perf/peak_rss_gb"}


def train(run_dir: Path, *overrides: str, resume: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SMALL,
           f"trainer.run_dir={run_dir}", *overrides] + (["--resume"] if resume else [])
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=clean_env())
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def metrics_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_and_kill_in_iteration_3(run_dir: Path, *overrides: str) -> None:
    """Start `gigpo train` and SIGKILL its whole process group once iteration 3 has begun: iteration 2's
    metrics line is written after its checkpoint, so checkpoint 2 is complete and 3 is in flight."""
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SMALL, f"trainer.run_dir={run_dir}",
           *overrides]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=clean_env())
    deadline = time.time() + 300
    try:
        while time.time() < deadline:
            if (run_dir / "metrics.jsonl").exists() and any(r["iteration"] == 2 for r in metrics_of(run_dir)):
                break
            assert proc.poll() is None, "training exited before iteration 3"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert [r["iteration"] for r in metrics_of(run_dir)] == [0, 1, 2]


def gigpo(*args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "gigpo.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**clean_env(), **(env or {})})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc
