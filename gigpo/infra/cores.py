"""How many cores this process may use, and each process's share when several run side by side.

One place for the rule that the ranks of a CPU launch, `gigpo compare`'s parallel runs, every rank's env workers
and the test workers follow: split the usable cores evenly, at least one each, and keep a thread count the user set.
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask, which `taskset` and a container's cpuset narrow, where
    `os.cpu_count()` reports the whole machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity mask
        return os.cpu_count() or 1


def share_of_cores(processes: int) -> int:
    """Each of `processes` side-by-side processes' share of the usable cores, at least 1."""
    if processes < 1:
        raise ValueError(f"processes={processes} must be at least 1")
    return max(1, usable_cores() // processes)


def share_threads(env: MutableMapping[str, str], processes: int) -> str:
    """Set OMP_NUM_THREADS in `env` (a child's environment) to one process's share, unless the user set it; returns
    the value in effect. Without it each process starts a thread per core, and the thread teams, which wait for their
    slowest thread at every op, outnumber the cores."""
    return env.setdefault("OMP_NUM_THREADS", str(share_of_cores(processes)))
