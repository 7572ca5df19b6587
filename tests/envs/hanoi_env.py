"""Tower of Hanoi with 3 disks and 2 start states: a policy the tiny model learns to ~100% from its BFS expert.

Used by the no-shock test (issue 38 item 0): RL's first updates must not knock such a sharp warm-started
policy down. Importable as `hanoi_env:tests/Hanoi-v0` with this folder on PYTHONPATH.
"""
from __future__ import annotations

import itertools
from collections import deque
from functools import lru_cache
from typing import Any, Optional

from gigpo.envs import AgentEnv, register_env

PEGS = "ABC"
DISKS = 3
GOAL = (2, 2, 2)
TOWERS = ((0, 0, 0), (1, 1, 1))  # all disks on A, or all on B; the goal is all on C
ALL = tuple(s for s in itertools.product(range(len(PEGS)), repeat=DISKS) if s != GOAL)  # any start but the goal
MOVES = [f"{a} to {b}" for a in PEGS for b in PEGS if a != b]


def legal(state: tuple[int, ...], move: str) -> Optional[tuple[int, ...]]:
    """The state after `move` ("A to C"), or None when the source peg is empty or its top disk is larger."""
    src, dst = PEGS.index(move[0]), PEGS.index(move[-1])
    on_src = [d for d in range(DISKS) if state[d] == src]  # disk 0 is the smallest
    on_dst = [d for d in range(DISKS) if state[d] == dst]
    if not on_src or (on_dst and min(on_dst) < min(on_src)):
        return None
    moved = list(state)
    moved[min(on_src)] = dst
    return tuple(moved)


@lru_cache(maxsize=None)
def best_move(state: tuple[int, ...]) -> Optional[str]:
    """First move of a shortest solution (breadth-first search from the state; ties by MOVES order)."""
    first: dict[tuple[int, ...], Optional[str]] = {state: None}
    queue = deque([state])
    while queue:
        node = queue.popleft()
        if node == GOAL:
            return first[node]
        for move in MOVES:
            nxt = legal(node, move)
            if nxt is not None and nxt not in first:
                first[nxt] = first[node] or move
                queue.append(nxt)
    return None


class HanoiEnv(AgentEnv):
    task = "Move all disks to peg C."

    def __init__(self, starts: str = "towers", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.starts = TOWERS if starts == "towers" else ALL

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.state = self.starts[int(self.np_random.integers(len(self.starts)))]
        return self._text(), {}

    def _text(self) -> str:
        return " ".join(f"{p}:" + "".join(str(d + 1) for d in reversed(range(DISKS)) if self.state[d] == i)
                        for i, p in enumerate(PEGS))

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.state = legal(self.state, action)
        self._won = self.state == GOAL
        return self._text(), 10.0 if self._won else 0.0, self._won, {}

    def admissible_actions(self) -> list[str]:
        return [m for m in MOVES if legal(self.state, m) is not None]

    def expert_action(self) -> Optional[str]:
        return best_move(self.state)


register_env("tests/Hanoi-v0", HanoiEnv)
