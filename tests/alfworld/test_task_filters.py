"""Task filters (task types, scene range, walkthrough length) on the shipped sample, checked against the
task files themselves, through find_tasks, the env's kwargs and a recipe's env section."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gigpo.config import EnvConfig
from gigpo.envs.alfworld import ENV_ID
from gigpo.envs.alfworld.data import find_tasks
from gigpo.envs.alfworld.env import ALFWorldEnv
from gigpo.envs.alfworld.evaluate import evaluate, expert_policy
from gigpo.envs.alfworld.game import GAME_FILE, TRAJ_FILE


def _on_disk(split_dir: Path) -> dict[str, tuple[str, int, int]]:
    """task folder -> (type, scene, walkthrough length), read straight from the files."""
    out = {}
    for traj_path in split_dir.rglob(TRAJ_FILE):
        traj = json.loads(traj_path.read_text())
        game = json.loads((traj_path.parent / GAME_FILE).read_text())
        out[traj_path.parent.parent.name] = (traj["task_type"], traj["scene"]["scene_num"], len(game["walkthrough"]))
    return out


def _names(tasks: list) -> set[str]:
    return {t.path.parent.name for t in tasks}


def test_filters_keep_exactly_the_matching_tasks(sample_data: Path) -> None:
    disk = _on_disk(sample_data / "valid_unseen")
    assert len(disk) == 6
    rooms = find_tasks(str(sample_data), "valid_unseen", scene_range=[201, 430])
    assert _names(rooms) == {k for k, (_, scene, _) in disk.items() if 201 <= scene <= 430}
    assert 0 < len(rooms) < len(disk)  # the sample has kitchens and other rooms: the filter does something
    lengths = sorted(n for _, _, n in disk.values())
    cut = lengths[len(lengths) // 2]
    short = find_tasks(str(sample_data), "valid_unseen", max_walkthrough=cut)
    assert _names(short) == {k for k, (_, _, n) in disk.items() if n <= cut} and 0 < len(short) < len(disk)
    both = find_tasks(str(sample_data), "valid_unseen", ["look_at_obj_in_light", "pick_two_obj_and_place"],
                      scene_range=[300, 430], max_walkthrough=20)
    assert _names(both) == {k for k, (t, s, n) in disk.items()
                            if t in ("look_at_obj_in_light", "pick_two_obj_and_place") and 300 <= s <= 430 and n <= 20}
    assert len(both) == 1  # the 32-step look_at task is cut, the 13-step pick-two task kept
    # The order is a pure function of the kept set: the same call gives the same seed -> task map.
    assert find_tasks(str(sample_data), "valid_unseen", scene_range=(201, 430)) == rooms


def test_env_and_recipe_take_the_filters(sample_data: Path) -> None:
    env = ALFWorldEnv(data_path=str(sample_data), split="valid_unseen", scene_range=[201, 430], max_walkthrough=15)
    scenes = {t.scene for t in env.tasks}
    assert scenes and all(201 <= s <= 430 for s in scenes)
    for seed in range(env.num_tasks):
        env.reset(seed=seed)
        assert 201 <= env._task_files.scene <= 430
    kwargs = {"data_path": str(sample_data), "task_types": ["pick_and_place_simple", "look_at_obj_in_light"],
              "scene_range": [201, 430], "max_walkthrough": 15, "prompt": "memory"}
    assert EnvConfig(id=ENV_ID, kwargs=kwargs).kwargs["scene_range"] == [201, 430]
    with pytest.raises(ValueError, match="scene_ranges"):
        EnvConfig(id=ENV_ID, kwargs={"scene_ranges": [1, 2]})
    # Evaluation plays each kept task once (not the unfiltered count, which would wrap seeds onto repeats).
    result = evaluate(expert_policy, str(sample_data), split="valid_unseen", workers=1,
                      env_kwargs={"expert": True, "scene_range": [201, 430], "max_walkthrough": 15})
    kept = find_tasks(str(sample_data), "valid_unseen", scene_range=[201, 430], max_walkthrough=15)
    assert result.episodes == len(kept) == 2 and result.wins == 2
    assert set(result.by_type) == {t.task_type for t in kept}


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"task_types": ["pick_and_place"]}, ValueError, r"unknown \['pick_and_place'\]"),
    ({"scene_range": [430, 201]}, ValueError, r"scene_range=\[430, 201\] must be \[first, last\]"),
    ({"scene_range": "bedrooms"}, ValueError, r"scene_range='bedrooms'"),
    ({"scene_range": [1, 2, 3]}, ValueError, r"scene_range=\[1, 2, 3\]"),
    ({"max_walkthrough": 0}, ValueError, "max_walkthrough=0 must be"),
    ({"scene_range": [100, 150]}, FileNotFoundError, r"no solvable tasks with .*scene_range=\[100, 150\]"),
    ({"max_walkthrough": 3}, FileNotFoundError, r"no solvable tasks with .*max_walkthrough=3.*6 solvable tasks"),
])
def test_bad_filters_name_the_value(sample_data: Path, kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        find_tasks(str(sample_data), "valid_unseen", **kwargs)
