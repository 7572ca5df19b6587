"""What the grid worlds (Sokoban, the maze) share: moves on a grid of cells, a breadth-first planner over
any state, a flood fill, and the expert built on the planner."""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Hashable, Iterable, Optional, TypeVar

from gigpo.envs.base import AgentEnv

Cell = tuple[int, int]
State = TypeVar("State", bound=Hashable)

MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ACTIONS = list(MOVES)


def shift(cell: Cell, move: Cell) -> Cell:
    return cell[0] + move[0], cell[1] + move[1]


def pair(name: str, value: Any) -> tuple[int, int]:
    """An int or a (low, high) pair as (low, high), for ranges such as `solution_length`."""
    low, high = (value, value) if isinstance(value, int) else tuple(value)
    if not 0 <= low <= high:
        raise ValueError(f"{name}={value!r} must be an int or a (low, high) pair with 0 <= low <= high")
    return int(low), int(high)


def flood(start: Cell, passable: Callable[[Cell], bool]) -> set[Cell]:
    """Every cell reachable from `start` through cells that are `passable`."""
    seen, todo = {start}, [start]
    while todo:
        cell = todo.pop()
        for move in MOVES.values():
            nxt = shift(cell, move)
            if nxt not in seen and passable(nxt):
                seen.add(nxt)
                todo.append(nxt)
    return seen


def shortest_plan(start: State, successors: Callable[[State], Iterable[tuple[str, State]]],
                  solved: Callable[[State], bool], max_depth: Optional[int] = None) -> Optional[list[str]]:
    """A shortest list of actions from `start` to a `solved` state (breadth-first, actions tried in the order
    `successors` yields them, so the plan is the same in every process), or None if none is reachable
    within `max_depth` moves."""
    if solved(start):
        return []
    parent: dict[State, tuple[State, str]] = {}
    depth = {start: 0}
    frontier = deque([start])
    while frontier:
        current = frontier.popleft()
        if max_depth is not None and depth[current] >= max_depth:
            continue
        for action, nxt in successors(current):
            if nxt in depth:
                continue
            depth[nxt] = depth[current] + 1
            parent[nxt] = (current, action)
            if solved(nxt):
                plan = []
                while nxt != start:
                    nxt, move = parent[nxt]
                    plan.append(move)
                return plan[::-1]
            frontier.append(nxt)
    return None


class GridEnv(AgentEnv):
    """An AgentEnv moved by up/down/left/right whose expert plays the first move of a shortest plan."""

    def plan(self) -> Optional[list[str]]:
        """A shortest plan from the current state, or None when there is none."""
        raise NotImplementedError

    def admissible_actions(self) -> list[str]:
        return list(ACTIONS)

    def expert_action(self) -> Optional[str]:
        """First move of a shortest plan from here; None once solved, or stuck for good."""
        plan = self.plan()
        return plan[0] if plan else None
