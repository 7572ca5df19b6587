"""The rule policy that reads only the memory prompt: its reading of the text, its choices, and two real wins."""
from __future__ import annotations

from pathlib import Path

import pytest

from gigpo.envs.alfworld.env import ALFWorldEnv
from gigpo.envs.alfworld.rule_policy import Goal, choose, parse_goal, parse_prompt
from gigpo.envs.prompt import render_prompt


def _prompt(task: str, memory: str, admissible: list[str]) -> str:
    return render_prompt(ALFWorldEnv.memory_prompt_template, task, 1, 20, "(observation)", [], 0, admissible, "",
                         memory=memory)


@pytest.mark.parametrize(("task", "goal"), [
    ("put a cellphone in shelf.", Goal("place", "cellphone", "shelf")),
    ("put some soapbar on bathtubbasin.", Goal("place", "soapbar", "bathtubbasin")),
    ("examine the cd with the desklamp.", Goal("light", "cd", "desklamp")),
    ("look at pillow under the floorlamp.", Goal("light", "pillow", "floorlamp")),
])
def test_goal_sentences(task: str, goal: Goal) -> None:
    assert parse_goal(task) == goal


def test_unsupported_task_and_non_memory_prompt_are_refused() -> None:
    with pytest.raises(ValueError, match="'heat some egg and put it in fridge.'"):
        parse_goal("heat some egg and put it in fridge.")
    with pytest.raises(ValueError, match="not a memory prompt"):
        choose("Your task is to: put a cd in shelf.\nCurrent observation:\nx\nAdmissible actions: look\n")


def test_choices_follow_the_memory() -> None:
    memory = ("Not visited yet: drawer 2, shelf 1, desk 1.\nSeen so far:\n- drawer 1: closed, not looked inside\n"
              "You are at drawer 1, holding nothing.\n")
    moves = ["go to drawer 2", "go to shelf 1", "go to desk 1", "open drawer 1", "look"]
    parsed = parse_prompt(_prompt("put a cd in shelf.", memory, moves))
    assert parsed.unvisited == ["drawer 2", "shelf 1", "desk 1"] and parsed.seen == {"drawer 1": None}
    assert parsed.location == "drawer 1" and parsed.holding == []
    # Closed and not looked inside: open it before moving on.
    assert choose(_prompt("put a cd in shelf.", memory, moves)) == "open drawer 1"
    # Looked inside, nothing there: the next unvisited receptacle that can hold a cd (drawer 2), in room order.
    looked = memory.replace("closed, not looked inside", "nothing")
    assert choose(_prompt("put a cd in shelf.", looked, moves[:3] + ["look"])) == "go to drawer 2"
    # A laptop is never in a drawer or on a shelf: the desk first, though it is last in the room's order.
    assert choose(_prompt("look at laptop under the desklamp.", looked, moves[:3])) == "go to desk 1"
    # Seen elsewhere: go there; in sight: take it.
    seen_cd = looked.replace("- drawer 1: nothing", "- drawer 1: cd 2, pen 1").replace("at drawer 1", "at shelf 1")
    assert choose(_prompt("put a cd in shelf.", seen_cd, ["go to drawer 1", "go to desk 1"])) == "go to drawer 1"
    here = seen_cd.replace("at shelf 1", "at drawer 1")
    assert choose(_prompt("put a cd in shelf.", here, ["take cd 2 from drawer 1", "take pen 1 from drawer 1",
                                                       "go to shelf 1"])) == "take cd 2 from drawer 1"
    # Holding it: to a receptacle of the goal type, then put it there.
    held = here.replace("holding nothing", "holding cd 2")
    assert choose(_prompt("put a cd in shelf.", held, ["go to shelf 1", "go to desk 1"])) == "go to shelf 1"
    at_shelf = held.replace("at drawer 1", "at shelf 1")
    assert choose(_prompt("put a cd in shelf.", at_shelf, ["move cd 2 to shelf 1", "go to desk 1"])) == \
        "move cd 2 to shelf 1"
    # Holding it for a lamp task: switch on the lamp when it is here, else go where one was seen.
    lamp_seen = held.replace("- drawer 1: cd 2, pen 1", "- drawer 1: pen 1\n- desk 1: desklamp 1")
    assert choose(_prompt("examine the cd with the desklamp.", lamp_seen, ["go to desk 1", "go to shelf 1"])) == \
        "go to desk 1"
    assert choose(_prompt("examine the cd with the desklamp.", lamp_seen, ["use desklamp 1", "go to shelf 1"])) == \
        "use desklamp 1"


def test_rule_wins_the_sample_tasks_from_the_prompt_alone(sample_data: Path) -> None:
    for task_type in ("pick_and_place_simple", "look_at_obj_in_light"):
        env = ALFWorldEnv(data_path=str(sample_data), split="valid_unseen", task_types=[task_type], prompt="memory")
        observation, info = env.reset(seed=0)
        for step in range(20):
            prompt = render_prompt(env.prompt_template, env.task, step + 1, 20, observation, [], 0,
                                   info["admissible_actions"], env.action_format, memory=info["memory"])
            observation, _, terminated, _, info = env.step(f"<action>{choose(prompt)}</action>")
            assert info["action_valid"]
            if terminated:
                break
        assert env.won(), task_type
