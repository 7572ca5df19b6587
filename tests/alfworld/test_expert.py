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
