"""The offline task generator: official folder format, all six types, expert-verified, deterministic."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gigpo.envs.alfworld.data import find_tasks
from gigpo.envs.alfworld.game import GAME_FILE, TASK_TYPES, TRAJ_FILE, TaskFiles, load_game_data, load_into, make_engine
from gigpo.envs.alfworld.generate import build_layout, generate_tasks, goal_candidates
from gigpo.envs.alfworld.scenes import available_scenes, load_scene


def _task_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "train").rglob(TRAJ_FILE))


def test_one_solvable_task_of_every_type_in_the_official_format(alfworld_data: Path) -> None:
    dirs = _task_dirs(alfworld_data)
    assert sorted(TaskFiles.read(d).task_type for d in dirs) == sorted(TASK_TYPES)
    for d in dirs:
        traj = json.loads((d / TRAJ_FILE).read_text())
        game = json.loads((d / GAME_FILE).read_text())
        assert set(game) >= {"pddl_domain", "pddl_problem", "grammar", "solvable", "walkthrough"}
        assert game["solvable"] is True and 0 < len(game["walkthrough"]) <= 50
        assert "UNKNOWN GOAL" not in game["grammar"]  # the goal sentence is filled in, like official files
        params = traj["pddl_params"]
        # <task_type>-<Object>-None-<Receptacle or lamp>-<scene>/trial_*, as in json_2.1.1
        target = params["parent_target"] or params["toggle_target"]
        assert d.parent.name == f"{traj['task_type']}-{params['object_target']}-None-{target}-{traj['scene']['scene_num']}"
        assert traj["scene"]["scene_num"] in available_scenes("train")


def test_stored_walkthrough_wins_on_a_plain_engine(alfworld_data: Path) -> None:
    """The walkthrough is a real solution: replayed without the expert, the PDDL goal holds at its end."""
    task = next(TaskFiles.read(d) for d in _task_dirs(alfworld_data) if "pick_two" in d.parent.name)
    data = load_game_data(task)
    engine = make_engine(expert=False)
    load_into(engine, task, data)
    state = engine.reset()
    assert not state["won"]
    for command in data["walkthrough"]:
        assert command in state["admissible_commands"]
        state, _, _ = engine.step(command)
    assert state["won"]


def test_same_seed_writes_byte_identical_files(alfworld_data: Path, sample_data: Path) -> None:
    """The session's fresh generation equals the shipped sample, written earlier by the same command."""
    fresh = sorted(p.relative_to(alfworld_data) for p in (alfworld_data / "train").rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(sample_data) for p in (sample_data / "train").rglob("*") if p.is_file())
    assert fresh == shipped and len(fresh) == 2 * len(TASK_TYPES)
    for rel in fresh:
        assert (alfworld_data / rel).read_bytes() == (sample_data / rel).read_bytes(), rel
    assert not any(p.name.startswith(".staging") for p in alfworld_data.iterdir())


def test_unseen_split_draws_from_held_out_scenes() -> None:
    train, unseen = set(available_scenes("train")), set(available_scenes("valid_unseen"))
    assert train and unseen and not train & unseen
    assert set(available_scenes("valid_seen")) == train


def test_bad_arguments_name_the_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="task_types"):
        generate_tasks(tmp_path, n=1, task_types=["pick_three_obj"])
    with pytest.raises(ValueError, match="split='test'"):
        generate_tasks(tmp_path, n=1, split="test")
    with pytest.raises(ValueError, match="n=0"):
        generate_tasks(tmp_path, n=0)
    with pytest.raises(ValueError, match="start=-1"):
        generate_tasks(tmp_path, n=1, start=-1)


def test_data_sources(alfworld_data: Path, sample_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The official download's layout, json_2.1.1/<split>, is found under the data root.
    (tmp_path / "json_2.1.1").mkdir()
    (tmp_path / "json_2.1.1" / "train").symlink_to(alfworld_data / "train")
    assert len(find_tasks(str(tmp_path), "train")) == len(TASK_TYPES)
    # a missing split says how to make it
    with pytest.raises(FileNotFoundError, match=r"valid_unseen.*`gigpo envs alfworld-generate --out \S+ --split valid_unseen"):
        find_tasks(str(tmp_path), "valid_unseen")
    # A folder of task folders is one split; $ALFWORLD_DATA is the default root.
    monkeypatch.setenv("ALFWORLD_DATA", str(sample_data / "valid_unseen"))
    assert [t.task_type for t in find_tasks(None, "train", ["look_at_obj_in_light"])] == ["look_at_obj_in_light"]
    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(ValueError, match="ALFWORLD_DATA"):
        find_tasks(None, "train")


@pytest.mark.parametrize("scene", [11, 212, 316, 415])
def test_goal_rules_follow_alfworld(scene: int) -> None:
    """No goal is won at the start, and heat/cool/clean goals never end in their own appliance."""
    layout = build_layout(load_scene(scene), random.Random(scene))
    starts = {(o.type, o.receptacle.type) for o in layout.objects}
    receptacle_types = {r.type for r in layout.receptacles}
    seen_types = set()
    for task_type in TASK_TYPES:
        for goal in goal_candidates(layout, task_type):
            seen_types.add(task_type)
            if task_type == "look_at_obj_in_light":
                assert goal.toggle_target in {o.type for o in layout.objects} and not goal.parent_target
                continue
            assert goal.parent_target in receptacle_types
            assert (goal.object_target, goal.parent_target) not in starts
            forbidden = {"pick_heat_then_place_in_recep": "Microwave", "pick_cool_then_place_in_recep": "Fridge",
                         "pick_clean_then_place_in_recep": "SinkBasin"}.get(task_type)
            assert goal.parent_target != forbidden
    room = load_scene(scene).room
    assert ("pick_heat_then_place_in_recep" in seen_types) == (room == "Kitchen" and "Microwave" in receptacle_types)
    assert "pick_and_place_simple" in seen_types
