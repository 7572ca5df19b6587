"""gigpo/infra/progress.py: a tqdm bar on a terminal, plain lines in a log file (no carriage returns)."""
from __future__ import annotations

import fcntl
import os
import select
import struct
import termios

from gigpo.infra.progress import Progress


def test_a_log_file_gets_a_plain_line_per_tenth_and_no_carriage_return(tmp_path):
    path = tmp_path / "log"
    with open(path, "w") as stream:
        bar = Progress("warm-up", total=40, unit="step", stream=stream)
        for step in bar.iterate(range(40)):
            bar.set_postfix(loss=f"{1 / (step + 1):.3f}")
    text = path.read_text()
    lines = text.splitlines()
    assert "\r" not in text and len(lines) == 10
    assert lines[0].startswith("warm-up: 4/40 step (10%)") and lines[0].endswith("loss=0.250")
    assert lines[-1].startswith("warm-up: 40/40 step (100%)")


def test_in_a_log_file_a_phase_shorter_than_the_interval_is_silent_and_a_longer_one_ends_with_a_line(tmp_path):
    path = tmp_path / "log"
    with open(path, "w") as stream:
        short = Progress("rollout", unit="ep", min_interval_s=3600, stream=stream)
        for done in range(1, 9):
            short(done, 8)
        short.close()
        assert path.read_text() == ""
        long = Progress("eval", unit="ep", min_interval_s=3600, stream=stream)
        long._last_line -= 3600  # the first tenth comes an hour in: due
        long(1, 8)
        for done in range(2, 7):
            long(done, 8)  # within the hour of the last line: not due
        long.close()
    lines = path.read_text().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["eval: 1/8 ep (12%)", "eval: 6/8 ep (75%)"]


def test_disabled_progress_writes_nothing(tmp_path):
    path = tmp_path / "log"
    with open(path, "w") as stream:
        with Progress("x", total=5, enabled=False, stream=stream) as bar:
            for _ in range(5):
                bar.update()
    assert path.read_text() == ""


def test_a_terminal_gets_tqdms_bar():
    """On a real pseudo-terminal the bar is tqdm's, redrawn in place (the carriage returns a log must not get)."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a new pty is 0 columns wide
    try:
        with os.fdopen(follower, "w", closefd=False) as stream:
            bar = Progress("rollout", unit="ep", stream=stream)
            assert bar.bar is not None
            bar(3, 8)
            bar.close()
        out = b""
        while select.select([leader], [], [], 0.5)[0]:
            out += os.read(leader, 4096)
    finally:
        os.close(follower)
        os.close(leader)
    assert b"\r" in out and b"rollout" in out and b"3/8" in out
