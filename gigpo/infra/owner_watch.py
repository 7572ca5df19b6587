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

OWNER_ENV = "GIGPO_ENGINE_OWNER_PID"
POLL_S = 1.0


def name_this_process_the_owner() -> None:
    """Called before an engine is built: the processes it spawns inherit this pid (and this process's start)."""
    os.environ[OWNER_ENV] = f"{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> Optional[str]:
    """The process's start in clock ticks since boot (field 22 of /proc/PID/stat): a pid reused by another
    process has another start. None when the process is gone or is a zombie (killed, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def watch_owner(poll_s: float = POLL_S) -> Optional[threading.Thread]:
    """In an engine process the owner spawned: a daemon thread that kills this process and its parent (the
    engine core, when that is not the owner itself) once the owner is gone. None where there is no owner to
    watch: the variable unset, or this process is the owner (an engine core run in process)."""
    owner = os.environ.get(OWNER_ENV, "")
    pid_text, _, start = owner.partition(":")
    if not pid_text.isdigit() or not start.isdigit() or int(pid_text) == os.getpid():
        return None  # no owner, or one whose start could not be read (no /proc): nothing to compare against
    pid = int(pid_text)
    parent = os.getppid()  # the engine core, recorded now: once orphaned, this process gets another parent
    parent_start = _start_time(parent)

    def watch() -> None:
        while _start_time(pid) == start:
            time.sleep(poll_s)
        if parent != pid and _start_time(parent) == parent_start:
            os.kill(parent, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="gigpo-owner-watch", daemon=True)
    thread.start()
    return thread
