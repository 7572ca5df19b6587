"""How far GraphGPO's goal distances on ALFWorld rest on states that differ only in what the agent holds.

The runs key states by the observation text (`env.kwargs.anchor: observation`). That text does not say what the
agent carries, so "You arrive at coffeetable 1. On the coffeetable 1, you see ..." is one graph node whether the
agent brings the keychain or not. A winner's path (arrive carrying it -> move it -> goal) then makes the node one
step from the goal for every trajectory that arrives empty-handed too.

For each train record this rebuilds the graph twice, from the record's anchor keys and from those keys plus the
object the agent holds (read from its own valid `take`/`move`/`put` actions, a proxy: the engine's state is not in
the record), and counts the rows, in task groups with a win, whose next state is nearer the goal (or only
reachable) with the observation keys. It also gives those rows' share of GraphGPO's positive step part, scored with
the record's own options whatever estimator its run trained with.

    python docs/results/issue58-alfworld/graph_aliasing.py RUN_DIR/records/000015-train.jsonl.gz ...
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from gigpo.advantage import compute_advantages
from gigpo.advantage.cli import recorded_options
from gigpo.advantage.estimators import advantage_options, step_groups
from gigpo.advantage.graphgpo import goal_distances
from gigpo.advantage.rows import StepRows
from gigpo.viewer.record_files import read_record, record_step_rows


def held_objects(trajs: list[dict]) -> list[str]:
    """The object each row's agent holds before it acts ('' for none), in the record's row order."""
    held_per_row = []
    for traj in trajs:
        held = ""
        for step in traj["steps"]:
            held_per_row.append(held)
            action = step.get("action") or ""
            if step.get("valid") and action.startswith("take "):
                held = action[len("take "):].split(" from ")[0]
            elif step.get("valid") and action.startswith(("move ", "put ")):
                held = ""
    return held_per_row


def with_held_object(rows: StepRows, held: list[str]) -> StepRows:
    keys = [int(hashlib.blake2b(f"{a}|{h}".encode(), digest_size=8).hexdigest(), 16) for a, h in zip(rows.anchor, held)]
    return replace(rows, anchor=np.asarray(keys, dtype=np.uint64))


def next_state_distance(rows: StepRows, goal_return: float) -> tuple[np.ndarray, np.ndarray]:
    """d(next state) per row, and whether that state reaches its group's goal at all."""
    node, n_nodes = step_groups(rows, rows.layout, None)
    d_next = goal_distances(rows, rows.layout, node, n_nodes, goal_return)[1]
    group = rows.layout.group_id
    unreachable = np.zeros(rows.layout.n_groups)        # goal_distances puts unreachable states at far + 1
    np.maximum.at(unreachable, group, d_next)
    return d_next, d_next < unreachable[group]


def graphgpo_step_part(rows: StepRows, header: dict) -> np.ndarray:
    options = argparse.Namespace(**recorded_options(header), similarity=None)
    return compute_advantages("graphgpo", rows, **advantage_options(options, options.split_versions)).step_advantage


def main(paths: list[str]) -> None:
    print("run | iteration | rows in groups with a win | next state nearer the goal by observation keys | "
          "their share of GraphGPO's positive step part")
    for path in paths:
        header, rows = record_step_rows(Path(path))
        trajs = read_record(Path(path))[1]
        goal_return = header.get("graph_goal_return") or 0.0
        d_obs, reach_obs = next_state_distance(rows, goal_return)
        d_held, reach_held = next_state_distance(with_held_object(rows, held_objects(trajs)), goal_return)
        group_won = {t["group"] for t in trajs if t["won"]}
        in_won_group = np.array([t["group"] in group_won for t in trajs for _ in t["steps"]])
        nearer = in_won_group & reach_obs & (~reach_held | (d_held > d_obs))
        positive = np.clip(graphgpo_step_part(rows, header), 0.0, None)
        share = positive[nearer].sum() / positive.sum() if positive.sum() > 0 else float("nan")
        print(f"{Path(path).parents[1].name} | {header['iteration']} | {in_won_group.sum()} | "
              f"{nearer.sum()} ({nearer.sum() / max(in_won_group.sum(), 1):.0%}) | {share:.0%}")


if __name__ == "__main__":
    main(sys.argv[1:])
