"""`gigpo train > log 2>&1`: the log holds plain progress lines, no carriage-return bar fragments."""
from __future__ import annotations

import re
import subprocess
import sys

from support.run import REPO, SMALL, clean_env

TINY_WARMUP = ["trainer.sft_steps=10", "trainer.sft_rooms=10", "trainer.sft_batch_size=4", "env.max_steps=4"]
"""A warm-up of ten steps: a line per step in the log."""


def test_a_two_iteration_run_logged_to_a_file_has_progress_lines_and_no_carriage_return(tmp_path):
    """Bars on (logging.progress=true, the default) and a warm-up that really runs (its own cache), output to
    a file as `make train > log 2>&1` writes it. Before, tqdm's redraws filled the log with '\\r' fragments."""
    log = tmp_path / "log"
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SMALL, *TINY_WARMUP,
           "logging.progress=true", "trainer.iterations=2", f"trainer.run_dir={tmp_path / 'run'}"]
    env = {**clean_env(), "GIGPO_CACHE": str(tmp_path / "cache")}
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=600, env=env)
    raw = log.read_bytes()  # bytes: reading text would turn each '\r' into a newline
    text = raw.decode()
    assert proc.returncode == 0, text[-5000:]
    assert b"\r" not in raw, text[:5000]
    lines = text.splitlines()
    warmup = [line for line in lines if line.startswith("warm-up (supervised): ")]
    assert len(warmup) == 10 and warmup[-1].startswith("warm-up (supervised): 10/10 step (100%)")
    assert "loss=" in warmup[0]
    assert [line.split()[1] for line in lines if re.match(r"iter \d+/2 ", line)] == ["1/2", "2/2"]  # the loop's own
