"""Find ALFWorld task folders: official `json_2.1.1/<split>` data, generated tasks, or `$ALFWORLD_DATA`."""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from gigpo.envs.alfworld.game import GAME_FILE, SPLITS, TASK_TYPES, TRAJ_FILE, TaskFiles
DATA_ENV_VAR = "ALFWORLD_DATA"


def resolve_split_dir(data_path: Optional[str], split: str) -> Path:
    """`data_path` (or $ALFWORLD_DATA) -> the folder holding the split's tasks.

    Accepted layouts: `<root>/json_2.1.1/<split>` (official download), `<root>/<split>` (what
    `gigpo envs alfworld-generate --out <root>` writes), or `<root>` itself holding task folders.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {', '.join(SPLITS)}")
    root_text = data_path or os.environ.get(DATA_ENV_VAR)
    if not root_text:
        raise ValueError(
            f"no ALFWorld data: pass data_path= (env kwargs) or set ${DATA_ENV_VAR}; "
            "make tasks with `gigpo envs alfworld-generate --out DIR --n N --seed S`"
        )
    root = Path(os.path.expandvars(os.path.expanduser(root_text)))
    for candidate in (root / "json_2.1.1" / split, root / split):
        if candidate.is_dir():
            return candidate
    has_splits = any((root / s).is_dir() or (root / "json_2.1.1" / s).is_dir() for s in SPLITS)
    if root.is_dir() and not has_splits and any(root.rglob(TRAJ_FILE)):
        return root
    raise FileNotFoundError(
        f"data_path={str(root)!r} holds no ALFWorld tasks for split {split!r}: expected "
        f"{root}/json_2.1.1/{split}, {root}/{split}, or task folders under {root}; make them with "
        f"`gigpo envs alfworld-generate --out {root} --split {split} --n N --seed 0` (docs/alfworld.md)"
    )


@lru_cache(maxsize=16)
def _scan(split_dir: Path, task_types: tuple[str, ...]) -> tuple[TaskFiles, ...]:
    tasks = []
    for traj_path in sorted(split_dir.rglob(TRAJ_FILE)):
        folder = traj_path.parent
        # ALFWorld's own loader skips these (movable receptacles and sliced objects are unsupported).
        if "movable" in str(folder) or "Sliced" in str(folder) or not (folder / GAME_FILE).is_file():
            continue
        task = TaskFiles.read(folder)
        if task.task_type not in task_types:
            continue
        if not json.loads((folder / GAME_FILE).read_text()).get("solvable", False):
            continue
        tasks.append(task)
    return tuple(interleave_types(tasks, split_dir))


def interleave_types(tasks: Sequence[TaskFiles], split_dir: Path) -> list[TaskFiles]:
    """The tasks in seed order: one of each type in turn, each type's tasks in a fixed hashed order.

    Task folders sort by type (`pick_and_place_simple-...`), so taking them in path order put runs of
    consecutive seeds on one or two types: demonstrations, evaluations of the first N tasks and whole
    stretches of RL iterations then saw a few types only. The hash is of the path inside the split, so
    the order is the same on every machine and under every checkout location.
    """
    def hashed(task: TaskFiles) -> str:
        return hashlib.sha256(task.path.relative_to(split_dir).as_posix().encode()).hexdigest()

    queues = [sorted((t for t in tasks if t.task_type == kind), key=hashed) for kind in TASK_TYPES]
    queues = [q for q in queues if q]
    longest = max((len(q) for q in queues), default=0)
    return [q[i] for i in range(longest) for q in queues if i < len(q)]


def find_tasks(data_path: Optional[str], split: str = "train", task_types: Optional[Sequence[str]] = None) -> list[TaskFiles]:
    """All solvable tasks of the split, in seed order (`interleave_types`: the same task for a seed everywhere,
    and every run of consecutive seeds spread over the task types)."""
    types = tuple(task_types) if task_types else TASK_TYPES
    unknown = [t for t in types if t not in TASK_TYPES]
    if unknown:
        raise ValueError(f"task_types={list(types)}: unknown {unknown}; valid: {', '.join(TASK_TYPES)}")
    split_dir = resolve_split_dir(data_path, split)
    tasks = list(_scan(split_dir.resolve(), types))
    if not tasks:
        raise FileNotFoundError(f"no solvable tasks of types {list(types)} under {split_dir}")
    return tasks
