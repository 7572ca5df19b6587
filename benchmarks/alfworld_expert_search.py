"""Expert episode length with and without the re-search fix, on the same ALFWorld tasks and seeds.

    PYTHONPATH=. python benchmarks/alfworld_expert_search.py --data ~/.cache/gigpo/alfworld/subset-s0 \
        --split valid_seen --seeds 0 1

Plays every task of the split under each seed with the stock search (`search_once=False`: alfworld's
hand-coded expert with only the move/put fix) and with `SearchOnce` (gigpo/envs/alfworld/game.py), and
prints, per task type and overall, wins, mean and max steps of the won episodes, and "repeat go-tos":
"go to R" commands to a receptacle the episode had already gone to. The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import defaultdict
from typing import Any

from gigpo.envs.alfworld.data import find_tasks
from gigpo.envs.alfworld.game import TaskFiles, expert_action, load_game_data, load_into, make_engine


def play(task: TaskFiles, data: dict[str, Any], search_once: bool, seed: int, max_steps: int) -> tuple[bool, list[str]]:
    engine = make_engine(expert=True, search_once=search_once)
    load_into(engine, task, data)
    random.seed(seed)
    state, commands = engine.reset(), []
    while not state["won"] and len(commands) < max_steps:
        command = expert_action(state)
        if command is None:
            break
        state, _, _ = engine.step(command)
        commands.append(command)
    return bool(state["won"]), commands


def repeat_gotos(commands: list[str]) -> int:
    goes = [c for c in commands if c.startswith("go to ")]
    return len(goes) - len(set(goes))


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    won = [r["steps"] for r in rows if r["won"]]
    return {"episodes": len(rows), "wins": len(won), "mean_steps": round(statistics.mean(won), 2) if won else None,
            "max_steps": max(won) if won else None, "repeat_gotos": sum(r["repeats"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--task-types", nargs="+", default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--max-steps", type=int, default=200, help="expert step limit (default 200, the expert's own)")
    args = parser.parse_args()

    tasks = find_tasks(args.data, args.split, args.task_types)
    rows: dict[str, list[dict[str, Any]]] = {"stock": [], "search_once": []}
    started = time.process_time()
    for task in tasks:
        data = load_game_data(task)
        for seed in args.seeds:
            for name, flag in (("stock", False), ("search_once", True)):
                won, commands = play(task, data, flag, seed, args.max_steps)
                rows[name].append({"type": task.task_type, "task": task.path.parent.name, "seed": seed, "won": won,
                                   "steps": len(commands), "repeats": repeat_gotos(commands)})
            old, new = rows["stock"][-1], rows["search_once"][-1]
            print(f"{task.path.parent.name:<60} seed {seed}: stock {old['steps']:>3} "
                  f"({'won' if old['won'] else 'LOST'}, {old['repeats']} repeat go-tos) -> search_once "
                  f"{new['steps']:>3} ({'won' if new['won'] else 'LOST'}, {new['repeats']} repeat go-tos)")
    result: dict[str, Any] = {"data": args.data, "split": args.split, "seeds": args.seeds, "tasks": len(tasks),
                              "cpu_s": round(time.process_time() - started, 1)}
    for name, table in rows.items():
        by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in table:
            by_type[row["type"]].append(row)
        result[name] = {"all": summarise(table), **{t: summarise(r) for t, r in sorted(by_type.items())}}
    for name in rows:
        for key, value in result[name].items():
            print(f"{name:<12} {key:<32} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
