"""The memory prompt (`prompt: memory`): what it lists after a scripted walk, checked against the engine's
hidden state, which it must never leak."""
from __future__ import annotations

from pathlib import Path

import pytest

from gigpo.envs.alfworld import ENV_ID
from gigpo.envs.alfworld.env import ALFWorldEnv, _args
from gigpo.envs.alfworld.memory import ObservedMemory, parse_items
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import view_prompt

# The bedroom of the shipped valid_unseen look_at_obj_in_light task (examine the cd with the desklamp).
WALK = ["go to sidetable 1", "take creditcard 1 from sidetable 1", "go to drawer 1", "open drawer 1",
        "move creditcard 1 to drawer 1", "close drawer 1", "go to drawer 2", "look"]


def _placements(env: ALFWorldEnv) -> dict[str, set[str]]:
    """receptacle -> objects in it, from the engine's facts (hidden from the agent)."""
    inside: dict[str, set[str]] = {}
    for fact in env._state["facts"]:
        if fact.name == "inreceptacle":
            obj, recep = _args(fact)
            inside.setdefault(recep, set()).add(obj)
    return inside


def _memory_lines(memory: str) -> dict[str, str]:
    return dict(line[2:].split(": ", 1) for line in memory.splitlines() if line.startswith("- "))


def test_memory_after_a_scripted_walk_lists_places_and_sightings_and_leaks_nothing(sample_data: Path) -> None:
    env = ALFWorldEnv(data_path=str(sample_data), split="valid_unseen", task_types=["look_at_obj_in_light"],
                      prompt="memory")
    first, info = env.reset(seed=0)
    room = parse_items(first.split("you see", 1)[1].rstrip("."))
    assert len(room) > 5 and info["memory"].startswith(f"Not visited yet: {', '.join(room)}.\n")
    hidden_at_start = _placements(env)

    for action in WALK:
        _, _, _, _, info = env.step(f"<action>{action}</action>")
        assert info["action_valid"], action
    memory = info["memory"]
    visited = ["sidetable 1", "drawer 1", "drawer 2"]
    # Unvisited receptacles, in the room's order.
    assert memory.splitlines()[0] == f"Not visited yet: {', '.join(r for r in room if r not in visited)}."
    # What was seen: exactly the engine's contents when the agent looked, then its own take and put.
    seen = _memory_lines(memory)
    assert list(seen) == visited
    now = _placements(env)
    assert set(seen["sidetable 1"].split(", ")) == now["sidetable 1"] == hidden_at_start["sidetable 1"] - {"creditcard 1"}
    assert set(seen["drawer 1"].split(", ")) == now["drawer 1"] == hidden_at_start["drawer 1"] | {"creditcard 1"}
    assert seen["drawer 2"] == "closed, not looked inside"
    assert memory.splitlines()[-1] == "You are at drawer 2, holding nothing."
    # Nothing the agent has not seen: objects in unvisited receptacles and in the unopened drawer 2.
    unseen = {obj for recep, objs in now.items() if recep not in ("sidetable 1", "drawer 1") for obj in objs}
    assert "cd 2" in unseen  # the task's target, in drawer 3, which the agent never opened
    for obj in unseen:
        assert obj not in memory, obj

    # An invalid action changes nothing, and the memory still reaches the prompt.
    _, reward, _, _, info = env.step("<action>fly to the moon</action>")
    assert reward < 0 and info["memory"] == memory


def test_memory_reaches_the_prompt_through_the_pool_and_the_history_prompt_is_unchanged(sample_data: Path) -> None:
    kwargs = {"data_path": str(sample_data), "split": "valid_unseen", "task_types": ["look_at_obj_in_light"]}
    with EnvPool(ENV_ID, {**kwargs, "prompt": "memory"}, workers=1) as pool:
        view = pool.reset([0], group_size=1)[0]
        view = pool.step({0: "<action>go to sidetable 1</action>"})[0]
    prompt = view_prompt(view, max_steps=20, history_length=2)
    assert view.info["memory"] in prompt and view.observation in prompt and "Last 1 step" not in prompt
    assert prompt.index("Your task is to:") < prompt.index("Not visited yet:") < prompt.index("Current observation:")
    assert all(command in prompt for command in view.admissible_actions)
    # The anchor stays the observation: the memory does not split GiGPO's step groups.
    assert view.anchor == view.observation

    history = ALFWorldEnv(**kwargs)
    _, info = history.reset(seed=0)
    assert "memory" not in info and "{memory}" not in history.prompt_template


def test_memory_tracks_heating_and_ignores_examined_objects() -> None:
    memory = ObservedMemory.start("You are in the middle of a room. Looking quickly around you, you see a "
                                  "countertop 1, a microwave 1, and a fridge 1.")
    memory.update("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1.")
    memory.update("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.")
    memory.update("examine apple 1", "There's nothing special about apple 1.")
    memory.update("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.")
    memory.update("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.")
    assert memory.render() == ("Not visited yet: fridge 1.\nSeen so far:\n- countertop 1: nothing\n"
                               "- microwave 1: closed, not looked inside\n"
                               "You are at microwave 1, holding apple 1 (hot).\n")


def test_bad_prompt_name_is_refused(sample_data: Path) -> None:
    with pytest.raises(ValueError, match="prompt='memories'"):
        ALFWorldEnv(data_path=str(sample_data), prompt="memories")
