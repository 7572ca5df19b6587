"""SIGTERM as an exception, so a `kill` or a scheduler's preemption unwinds like Ctrl-C.

Under the default action the process dies on the spot: no `finally` runs, and vLLM's engine-core child
(which ignores SIGTERM itself) and the env workers outlive it, holding memory and cores. Raised instead,
the stop reaches the training loop's `finally`, which closes the generator and the pools; completed
checkpoints are untouched, and `--resume` continues from the last one.
"""
from __future__ import annotations

import signal
from types import FrameType
from typing import Optional

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


class StopRequested(BaseException):
    """Raised in the main thread on SIGTERM. A BaseException, like KeyboardInterrupt, so the handlers that
    turn an env's or a server's `Exception` into a logged outcome do not swallow it."""


def _raise_stop(signum: int, frame: Optional[FrameType]) -> None:
    raise StopRequested(signal.Signals(signum).name)


def stop_on_sigterm() -> None:
    """From here on, SIGTERM raises StopRequested in the main thread (call it from the main thread)."""
    signal.signal(signal.SIGTERM, _raise_stop)
