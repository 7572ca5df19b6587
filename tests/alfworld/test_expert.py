"""The expert fix: alfworld 0.4.2's own expert loses pick-two tasks that ours wins, on the same engine."""
from __future__ import annotations

import random
from pathlib import Path

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert
from textworld.envs import PddlEnv

from gigpo.envs.alfworld.game import GAME_FILE, TaskFiles, expert_action, load_game_data, load_into, make_engine

STEPS = 30


def _play(engine: textworld.core.Environment) -> bool:
    random.seed(0)
    state = engine.reset()
    for _ in range(STEPS):
        command = expert_action(state)
        if command is None or state["won"]:
            break
        state, _, _ = engine.step(command)
    return bool(state["won"])


def test_fixed_expert_wins_the_pick_two_task_the_stock_expert_loses(sample_data: Path) -> None:
    folder = next((sample_data / "valid_unseen").glob("pick_two_obj_and_place-*/*"))
    task = TaskFiles.read(folder)

    fixed = make_engine(expert=True)
    load_into(fixed, task, load_game_data(task))
    assert _play(fixed)

    # alfworld's expert as shipped: it never sees a "put", so it thinks it still holds the first object.
    infos = textworld.EnvInfos(admissible_commands=True, won=True, facts=True, extras=["expert_plan"])
    stock = AlfredExpert(AlfredDemangler(PddlEnv(infos)))
    stock.load(str(folder / GAME_FILE))
    assert not _play(stock)


def _walk(task: TaskFiles, search_once: bool) -> tuple[bool, list[str]]:
    engine = make_engine(expert=True, search_once=search_once)
    load_into(engine, task, load_game_data(task))
    random.seed(0)
    state, commands = engine.reset(), []
    while not state["won"] and len(commands) < 50:
        commands.append(expert_action(state))
        state, _, _ = engine.step(commands[-1])
    return bool(state["won"]), commands


def test_expert_searches_no_receptacle_twice(sample_data: Path) -> None:
    # Examine the cd with the desklamp: the cd is in drawer 3, the lamp on desk 1. The stock search list
    # starts over from the whole room when the lamp search begins, so the expert checks again the
    # sidetable, shelf, garbage can and drawers 1-2 it saw while looking for the cd.
    task = TaskFiles.read(next((sample_data / "valid_unseen").glob("look_at_obj_in_light-*/*")))
    old_won, old = _walk(task, search_once=False)
    new_won, new = _walk(task, search_once=True)
    assert old_won and new_won
    old_goes, new_goes = [c for c in old if c.startswith("go to ")], [c for c in new if c.startswith("go to ")]
    assert len(set(old_goes)) < len(old_goes)  # the stock expert goes back
    assert len(set(new_goes)) == len(new_goes), new_goes
    assert len(new) < len(old)
    # Same search order until the cd is in hand: only the repeats are gone.
    taken = next(i for i, c in enumerate(old) if c.startswith("take cd"))
    assert new[:taken + 1] == old[:taken + 1]
