"""Engine and server processes that end when the process that started them is gone.

vLLM's engine core and its worker run in processes of their own and do not watch the process that started
them: a trainer killed by the OOM killer (SIGKILL, no clean-up runs) left both behind, holding 4.5 GB and
spinning, and the run resumed beside them with that much less memory. A `gigpo serve` that a trainer started
(rollout.backend=vllm-server) stayed behind the same way, with its own engine (2.8 GB for SmolLM2).

- `build_engine` names its own process in OWNER_ENV; the worker, which imports gigpo's weight-sync extension as
  it starts, watches that process and, once it is gone, kills the engine core (its parent) and itself.
- The trainer names itself in SERVER_OWNER_ENV when it starts a server; `gigpo serve` watches it and, once it
  is gone, kills its own process group (itself and its engine; the engine's worker also watches the server).
A process is named by its pid and its creation time, so a pid reused by another process reads as gone.
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


def this_process() -> str:
    """This process as an owner: pid and creation time (`pid:time`)."""
    return f"{os.getpid()}:{psutil.Process().create_time()!r}"


def name_this_process_the_owner() -> None:
    """Called before an engine is built: the processes it spawns inherit this process's name."""
    os.environ[OWNER_ENV] = this_process()


def _alive(pid: int, created: float) -> bool:
    """Whether `pid` is still the process created at `created`, and not a zombie (killed, not yet reaped)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _owner(env: str) -> Optional[tuple[int, float]]:
    """The owner named in `env`; None when unset, unreadable, or this very process."""
    pid_text, _, created_text = os.environ.get(env, "").partition(":")
    try:
        pid, created = int(pid_text), float(created_text)
    except ValueError:
        return None
    return None if pid == os.getpid() else (pid, created)


def _watch(owner: tuple[int, float], on_gone: Callable[[], None], poll_s: float) -> threading.Thread:
    def watch() -> None:
        while _alive(*owner):
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
