"""Engine processes that end when the process that built them is gone.

vLLM's engine core and its worker run in processes of their own and do not watch the process that started
them: a trainer killed by the OOM killer (SIGKILL, no clean-up runs) left both behind, holding 4.5 GB and
spinning, and the run resumed beside them with that much less memory. `build_engine` names its own pid in
OWNER_ENV; the worker, which imports gigpo's weight-sync extension as it starts, then watches that process
and, once it is gone, kills the engine core (its parent) and itself.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Optional

import psutil

OWNER_ENV = "GIGPO_ENGINE_OWNER_PID"
POLL_S = 1.0


def name_this_process_the_owner() -> None:
    """Called before an engine is built: the processes it spawns inherit this pid and this process's creation time
    (a pid reused by another process has another one)."""
    os.environ[OWNER_ENV] = f"{os.getpid()}:{psutil.Process().create_time()!r}"


def _alive(pid: int, created: float) -> bool:
    """Whether `pid` is still the process created at `created`, and not a zombie (killed, not yet reaped)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def watch_owner(poll_s: float = POLL_S) -> Optional[threading.Thread]:
    """In an engine process the owner spawned: a daemon thread that kills this process and its parent (the
    engine core, when that is not the owner itself) once the owner is gone. None where there is no owner to
    watch: the variable unset or unreadable, or this process is the owner (an engine core run in process)."""
    pid_text, _, created_text = os.environ.get(OWNER_ENV, "").partition(":")
    try:
        pid, created = int(pid_text), float(created_text)
    except ValueError:
        return None
    if pid == os.getpid():
        return None
    parent = psutil.Process().parent()  # the engine core, kept now: once orphaned, this process gets another parent

    def watch() -> None:
        while _alive(pid, created):
            time.sleep(poll_s)
        if parent is not None and parent.pid != pid:
            try:
                parent.kill()  # psutil refuses a pid that another process has taken since
            except psutil.Error:
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="gigpo-owner-watch", daemon=True)
    thread.start()
    return thread
