"""Find ALFWorld task folders: official `json_2.1.1/<split>` data, generated tasks, or `$ALFWORLD_DATA`."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TaskFilter:
    """Which of a split's solvable tasks to play: task types, a range of ALFRED scene numbers (inclusive;
    1-30 kitchens, 201-230 living rooms, 301-330 bedrooms, 401-430 bathrooms) and a longest walkthrough
    (the expert run stored in game.tw-pddl). None keeps everything."""

    task_types: tuple[str, ...] = TASK_TYPES
    scene_range: Optional[tuple[int, int]] = None
    max_walkthrough: Optional[int] = None

    @classmethod
    def make(cls, task_types: Optional[Sequence[str]] = None, scene_range: Optional[Sequence[int]] = None,
             max_walkthrough: Optional[int] = None) -> "TaskFilter":
        """Check the values; a bad one raises a ValueError naming it and what is allowed."""
        if isinstance(task_types, str):
            task_types = [task_types]
        types = tuple(task_types) if task_types else TASK_TYPES
        unknown = [t for t in types if t not in TASK_TYPES]
        if unknown:
            raise ValueError(f"task_types={list(types)}: unknown {unknown}; valid: {', '.join(TASK_TYPES)}")
        scenes = None
        if scene_range is not None:
            values = list(scene_range) if not isinstance(scene_range, (str, int)) else []
            if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values) \
                    or values[0] > values[1]:
                raise ValueError(f"scene_range={scene_range!r} must be [first, last], two scene numbers with "
                                 "first <= last, e.g. [201, 430] for every room but kitchens")
            scenes = (values[0], values[1])
        if max_walkthrough is not None and (isinstance(max_walkthrough, bool) or not isinstance(max_walkthrough, int)
                                            or max_walkthrough < 1):
            raise ValueError(f"max_walkthrough={max_walkthrough!r} must be a whole number of steps, at least 1")
        return cls(types, scenes, max_walkthrough)

    def keeps(self, task: TaskFiles, walkthrough: Optional[list[str]]) -> bool:
        if task.task_type not in self.task_types:
            return False
        if self.scene_range is not None:
            if task.scene is None:
                raise ValueError(f"scene_range={list(self.scene_range)}: {task.path}/{TRAJ_FILE} names no scene "
                                 "(scene.scene_num); drop scene_range for this data")
            if not self.scene_range[0] <= task.scene <= self.scene_range[1]:
                return False
        if self.max_walkthrough is not None:
            if walkthrough is None:
                raise ValueError(f"max_walkthrough={self.max_walkthrough}: {task.path}/{GAME_FILE} has no "
                                 "walkthrough; drop max_walkthrough for this data")
            if len(walkthrough) > self.max_walkthrough:
                return False
        return True

    def describe(self) -> str:
        parts = [f"task_types={list(self.task_types)}"]
        if self.scene_range is not None:
            parts.append(f"scene_range={list(self.scene_range)}")
        if self.max_walkthrough is not None:
            parts.append(f"max_walkthrough={self.max_walkthrough}")
        return ", ".join(parts)


@lru_cache(maxsize=16)
def _scan(split_dir: Path, wanted: TaskFilter) -> tuple[TaskFiles, ...]:
    tasks = []
    for traj_path in sorted(split_dir.rglob(TRAJ_FILE)):
        folder = traj_path.parent
        # ALFWorld's own loader skips these (movable receptacles and sliced objects are unsupported).
        if "movable" in str(folder) or "Sliced" in str(folder) or not (folder / GAME_FILE).is_file():
            continue
        task = TaskFiles.read(folder)
        if task.task_type not in wanted.task_types:
            continue
        game = json.loads((folder / GAME_FILE).read_text())
        if not game.get("solvable", False) or not wanted.keeps(task, game.get("walkthrough")):
            continue
        tasks.append(task)
    # Filter first, then order: consecutive seeds still cycle the kept types.
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


def find_tasks(data_path: Optional[str], split: str = "train", task_types: Optional[Sequence[str]] = None,
               scene_range: Optional[Sequence[int]] = None, max_walkthrough: Optional[int] = None) -> list[TaskFiles]:
    """The solvable tasks of the split that pass the filters (`TaskFilter`), in seed order
    (`interleave_types`: the same task for a seed everywhere, and every run of consecutive seeds spread over
    the task types). Filters that leave nothing raise an error naming them."""
    wanted = TaskFilter.make(task_types, scene_range, max_walkthrough)
    split_dir = resolve_split_dir(data_path, split)
    tasks = list(_scan(split_dir.resolve(), wanted))
    if not tasks:
        everything = _scan(split_dir.resolve(), TaskFilter())
        scenes = sorted({t.scene for t in everything if t.scene is not None})
        raise FileNotFoundError(
            f"no solvable tasks with {wanted.describe()} under {split_dir} ({len(everything)} solvable tasks there "
            f"in all, scenes {scenes[0] if scenes else '-'}..{scenes[-1] if scenes else '-'}); widen the filters")
    return tasks
