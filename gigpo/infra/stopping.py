"""SIGTERM and Ctrl-C (SIGINT) as one exception, so a `kill`, a scheduler's preemption and a user at the
terminal all unwind the same way and end with a one-line message, not a traceback.

Under the default action the process dies on the spot: no `finally` runs, and vLLM's engine-core child
(which ignores SIGTERM itself) and the env workers outlive it, holding memory and cores. Raised instead,
the stop reaches the training loop's `finally`, which closes the generator and the pools; completed
checkpoints are untouched, and `--resume` continues from the last one.

A multi-rank run's ranks live in a process group of their own (`stop_process_group`), which the `gigpo train` the
user started stops itself: DeepSpeed's runner (the several-machine launch) does not pass SIGTERM on, and a rank
stuck in a collective must be killed after a grace period whoever started it.
"""
from __future__ import annotations

import os
import signal
import time
from types import FrameType
from typing import Optional

import psutil

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM (130 for SIGINT)

_stopping = False
"""Set by the first SIGTERM or SIGINT: the process is unwinding, and later signals must not cut its cleanup short."""


class StopRequested(BaseException):
    """Raised in the main thread on SIGTERM or SIGINT. A BaseException, like KeyboardInterrupt, so the handlers
    that turn an env's or a server's `Exception` into a logged outcome do not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self):
        """Pickles by its signal number (the default would rebuild it from its message, 'SIGTERM', and fail)."""
        return (StopRequested, (self.signum,))

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process that this signal ended: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum


def _raise_stop(signum: int, frame: Optional[FrameType]) -> None:
    global _stopping
    if _stopping:  # a repeat (DeepSpeed's launcher passing on the group's signal, a second `kill`): the
        return     # first one's unwinding is already closing engines and workers; SIGKILL still ends it
    _stopping = True
    raise StopRequested(signum)


def stop_on_signals() -> None:
    """From here on, the first SIGTERM or SIGINT raises StopRequested in the main thread (call it from the main
    thread). Later ones are ignored while that one unwinds, a second Ctrl-C included; SIGKILL still ends it."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stop)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def stop_process_group(pgid: int, grace_s: float) -> list[int]:
    """SIGTERM to every process of group `pgid`, then SIGKILL to those still alive after `grace_s` seconds
    (a rank that waits in a collective for a peer that already stopped never returns to Python to see its
    signal). Returns the pids that had to be killed."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return []
    deadline = time.monotonic() + grace_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
