"""The test zygote (tests/support/zygote.py) answers as `python -m gigpo.cli` in a fresh process would: the same
output, exit code and errors, its own pid, and a timeout that kills what it started."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support import zygote
from support.run import REPO, clean_env


def fresh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gigpo.cli", *args], cwd=REPO, env=clean_env(), capture_output=True,
                          text=True, timeout=300)


def test_a_forked_command_prints_and_exits_as_a_fresh_process() -> None:
    for args in (["config", "recipes/sokoban_tiny.yaml", "trainer.lr=3e-6"],
                 ["config", "recipes/sokoban_tiny.yaml", "trainer.bogus=1"]):  # exit 2, one line naming the key
        forked, want = zygote.run_cli(args, cwd=REPO, env=clean_env(), timeout=300), fresh(*args)
        assert zygote.server_pid() is not None  # it did go through the server
        assert (forked.returncode, forked.stdout) == (want.returncode, want.stdout)
        assert forked.stderr.splitlines()[-1:] == want.stderr.splitlines()[-1:]
    assert forked.returncode == 2 and "trainer.bogus" in forked.stderr


def test_a_command_past_its_timeout_is_killed(tmp_path) -> None:
    run = tmp_path / "run"
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run_cli(["train", "recipes/sokoban_tiny.yaml", "trainer.iterations=100000", "logging.progress=false",
                        "logging.wandb_mode=disabled", "env.workers=1", f"trainer.run_dir={run}"],
                       cwd=REPO, env=clean_env(), timeout=1)
    # the server reaped the killed child and serves the next command
    assert zygote.run_cli(["config", "recipes/sokoban_tiny.yaml"], cwd=REPO, env=clean_env(), timeout=300).returncode == 0


def test_an_environment_read_at_import_time_runs_in_a_real_process(monkeypatch) -> None:
    env = {**clean_env(), "OMP_NUM_THREADS": str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)}
    assert zygote.added_python_path({"PYTHONPATH": "/a:/b"}, {"PYTHONPATH": "/b"}) == ["/a"]
    assert zygote.added_python_path({"PYTHONPATH": "/b:/a"}, {"PYTHONPATH": "/b"}) is None

    def no_fork(*args, **kwargs):
        raise AssertionError("forked although the preloaded modules read another OMP_NUM_THREADS")

    monkeypatch.setattr(zygote._Server, "run", no_fork)
    proc = zygote.run_cli(["config", "recipes/sokoban_tiny.yaml"], cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0 and "sokoban" in proc.stdout.lower()
