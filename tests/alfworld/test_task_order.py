"""Seed order over ALFWorld's tasks: consecutive seeds spread over the task types, the same on every machine.

Task folders are named `<task type>-...`, so path order puts each type's tasks in one block; a run of
consecutive seeds (the warm-up's demonstrations, an evaluation of the first N tasks, RL iterations) then
saw one or two types. These tests build split folders of the official layout with many tasks per type.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from gigpo.envs.alfworld.data import _scan, find_tasks
from gigpo.envs.alfworld.game import GAME_FILE, TASK_TYPES, TRAJ_FILE

PER_TYPE = (7, 3, 5, 1, 4, 6)  # uneven on purpose: a type that runs out must not stop the others


def _write_split(root: Path) -> Path:
    split = root / "train"
    for kind, count in zip(TASK_TYPES, PER_TYPE):
        for i in range(count):
            folder = split / f"{kind}-Obj{i}-None-Recep-{200 + i}" / "trial_T0"
            folder.mkdir(parents=True)
            (folder / TRAJ_FILE).write_text(json.dumps({"task_type": kind, "pddl_params": {"object_target": f"Obj{i}"}}))
            (folder / GAME_FILE).write_text(json.dumps({"solvable": True}))
    return split


def _order(root: Path) -> list[str]:
    return [t.path.relative_to(root).as_posix() for t in find_tasks(str(root), "train")]


def test_every_window_of_consecutive_seeds_covers_the_types_still_left(tmp_path: Path) -> None:
    _write_split(tmp_path)
    tasks = find_tasks(str(tmp_path), "train")
    assert len(tasks) == sum(PER_TYPE) and len({t.path for t in tasks}) == len(tasks)
    kinds = [t.task_type for t in tasks]
    assert set(kinds[:len(TASK_TYPES)]) == set(TASK_TYPES)  # path order: 7 of the first 6 would be one type
    # Round by round: round r holds one task of each type that has more than r tasks, in TASK_TYPES order.
    start = 0
    for r in range(max(PER_TYPE)):
        alive = [k for k, n in zip(TASK_TYPES, PER_TYPE) if n > r]
        assert kinds[start:start + len(alive)] == alive, (r, kinds)
        start += len(alive)


def test_order_is_the_same_wherever_the_data_lies(tmp_path: Path) -> None:
    """The hash is of the path inside the split, so a seed names one task on every machine."""
    _write_split(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "elsewhere" / "b")
    _scan.cache_clear()
    assert _order(tmp_path / "a") == _order(tmp_path / "elsewhere" / "b")


def test_within_a_type_the_order_does_not_follow_the_folder_names(tmp_path: Path) -> None:
    """Folder names sort by object and scene too: path order inside a type would give a seed stretch of one
    object class. The hashed order is a fixed permutation, not the sorted one (7 tasks: 1 in 5040 by chance)."""
    _write_split(tmp_path)
    first_type = [p for p in _order(tmp_path) if p.startswith(f"train/{TASK_TYPES[0]}-")]
    assert len(first_type) == PER_TYPE[0] and first_type != sorted(first_type)
