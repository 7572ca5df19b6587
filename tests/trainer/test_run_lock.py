"""One `gigpo train` per run directory: a second one into the same run_dir stops at once and names the first."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from support.run import REPO, SMALL, clean_env

from gigpo.infra.run_lock import LOCK_NAME, run_dir_lock


def test_a_second_train_into_a_busy_run_dir_is_refused_and_a_stopped_run_leaves_no_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SMALL, "trainer.iterations=10000",
           f"trainer.run_dir={run}"]
    first = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    try:
        deadline = time.monotonic() + 300
        while not (run / "metrics.jsonl").exists():  # training, not just starting: the lock is held by now
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not start training"
            time.sleep(0.5)
        assert (run / LOCK_NAME).read_text() == str(first.pid)
        lines = len((run / "metrics.jsonl").read_text().splitlines())
        second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=clean_env())
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"trainer.run_dir={run} is in use" in second.stderr and f"pid {first.pid}" in second.stderr
        assert first.poll() is None  # the running one goes on
        assert len((run / "metrics.jsonl").read_text().splitlines()) >= lines  # and nothing of it was cut
    finally:
        first.send_signal(signal.SIGTERM)  # stops at the next iteration's boundary, closing its env workers
        first.wait(timeout=300)
    with run_dir_lock(run):  # the stopped run's lock is gone (the kernel drops it on any exit): --resume may start
        pass
