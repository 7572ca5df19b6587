"""One `gigpo train` per run directory.

Two trainings writing one run_dir interleave their metrics.jsonl lines and overwrite each other's
checkpoints, and neither notices (seen: a second `make train` started in the same clone while the first
still ran). The process the user started holds an exclusive flock on `run_dir/.gigpo-train.lock` for the
whole run; the kernel drops it when that process ends in any way (SIGKILL included), so a crashed run
never leaves a stale lock behind, and `--resume` after it works at once.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_NAME = ".gigpo-train.lock"


class RunDirInUse(RuntimeError):
    """Another live process trains into the same run directory."""


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold run_dir's lock for the block; RunDirInUse (naming the holder's pid) if another process holds it."""
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise RunDirInUse(f"trainer.run_dir={run_dir} is in use by another `gigpo train` (pid {holder}): wait "
                              "for it or stop it, or give this run another trainer.run_dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            if created and [p.name for p in run_dir.iterdir()] == [LOCK_NAME]:
                path.unlink()  # a run that failed before writing anything leaves no directory behind
                run_dir.rmdir()
            fcntl.flock(fh, fcntl.LOCK_UN)
