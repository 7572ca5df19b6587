"""Engine and server processes that end when the process that started them is gone.

vLLM's engine core and its worker run in processes of their own and do not watch the process that started
them: a trainer killed by the OOM killer (SIGKILL, no clean-up runs) left both behind, holding 4.5 GB and
spinning, and the run resumed beside them with that much less memory. A `gigpo serve` that a trainer started
(rollout.backend=vllm-server) stayed behind the same way, with its own engine (2.8 GB for SmolLM2).

- `build_engine` names its own process in OWNER_ENV; the worker, which imports gigpo's weight-sync extension as
  it starts, watches that process and, once it is gone, kills the engine core (its parent) and itself.
- The trainer names itself in SERVER_OWNER_ENV when it starts a server; `gigpo serve` watches it and, once it
  is gone, kills its own process group (itself and its engine; the engine's worker also watches the server).
A process is named by its pid and its start in seconds since boot, so a pid reused by another process reads as
gone. Not by its start on the wall clock (psutil's `create_time`): that moves when the system clock is set (a
virtual machine resumed from a snapshot, NTP), and an engine would then kill itself under a live trainer.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Optional

import psutil

OWNER_ENV = "GIGPO_ENGINE_OWNER_PID"
SERVER_OWNER_ENV = "GIGPO_SERVER_OWNER_PID"
POLL_S = 1.0


def _since_boot(process: psutil.Process) -> float:
    """When `process` started, in seconds since boot: unlike its wall-clock start, the same in every process and
    at any later time, whatever the system clock did meanwhile (the boot time is read twice, in
    `create_time` and here; a clock set between the two reads fools one look of `_watch`, which looks twice)."""
    return round(process.create_time() - psutil.boot_time(), 2)


def this_process() -> str:
    """This process as an owner: pid and start since boot (`pid:seconds`)."""
    return f"{os.getpid()}:{_since_boot(psutil.Process())!r}"


def name_this_process_the_owner() -> None:
    """Called before an engine is built: the processes it spawns inherit this process's name."""
    os.environ[OWNER_ENV] = this_process()


def _alive(owner: tuple[int, float]) -> bool:
    """Whether the process `owner` names still runs: its pid started when the name says (not reused by another
    process), and it is not a zombie (killed, not yet reaped)."""
    pid, started = owner
    try:
        process = psutil.Process(pid)
        return abs(_since_boot(process) - started) < 0.5 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _owner(env: str) -> Optional[tuple[int, float]]:
    """The owner named in `env`; None when unset, unreadable, or this very process."""
    pid_text, _, started_text = os.environ.get(env, "").partition(":")
    try:
        pid, started = int(pid_text), float(started_text)
    except ValueError:
        return None
    return None if pid == os.getpid() else (pid, started)


def _watch(owner: tuple[int, float], on_gone: Callable[[], None], poll_s: float) -> threading.Thread:
    def watch() -> None:
        misses = 0
        while True:  # gone at two looks in a row: a clock set between _since_boot's two reads fools one look only
            misses = 0 if _alive(owner) else misses + 1
            if misses == 2:
                break
            time.sleep(poll_s)
        on_gone()

    thread = threading.Thread(target=watch, name="gigpo-owner-watch", daemon=True)
    thread.start()
    return thread


def watch_owner(poll_s: float = POLL_S) -> Optional[threading.Thread]:
    """In an engine process the owner spawned: a daemon thread that kills this process and its parent (the
    engine core, when that is not the owner itself) once the owner is gone. None where there is no owner to
    watch: the variable unset or unreadable, or this process is the owner (an engine core run in process)."""
    owner = _owner(OWNER_ENV)
    if owner is None:
        return None
    parent = psutil.Process().parent()  # the engine core, kept now: once orphaned, this process gets another parent

    def end_engine() -> None:
        if parent is not None and parent.pid != owner[0]:
            try:
                parent.kill()  # psutil refuses a pid that another process has taken since
            except psutil.Error:
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    return _watch(owner, end_engine, poll_s)


def watch_server_owner(poll_s: float = POLL_S) -> Optional[threading.Thread]:
    """In `gigpo serve`: a daemon thread that ends this server and its engine once the trainer that started it
    is gone. None for a server nobody named an owner for (started by hand: it runs until stopped)."""
    owner = _owner(SERVER_OWNER_ENV)
    if owner is None:
        return None

    def end_server() -> None:
        if os.getpgrp() == os.getpid():  # started in a session of its own: the group is this server and its engine
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    return _watch(owner, end_server, poll_s)
