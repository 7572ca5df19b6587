"""Sokoban as text: small rooms that are solvable by construction, with an optimal BFS expert.

Description
    Push every box onto a target. A room is made by playing backwards from the solved state (boxes
    on targets, the player pulling boxes), then kept only if a breadth-first search finds a shortest
    solution whose length lies in `solution_length`. The search is also the expert: `expert_action()`
    returns the first move of a shortest solution from the current state.
Observation
    The room's interior, one symbol per cell, one line per row (the outer wall is implied):
    ``# wall  _ floor  O target  X box  V box on target  P player  S player on target``.
Actions
    ``up``, ``down``, ``left``, ``right``. Walking into a wall or an unpushable box is a valid no-op.
Reward
    -0.1 per step, +1 for pushing a box onto a target, -1 for pushing one off, +10 when solved.
Episode end
    Terminated when every box is on a target; truncated by Gymnasium's TimeLimit (`max_episode_steps`).
Version history
    v0: first version.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np

from gigpo.envs.base import INVALID_ACTION_PENALTY
from gigpo.envs.grid import ACTIONS, MOVES, Cell, GridEnv, flood, pair, shift, shortest_plan

State = tuple[Cell, frozenset[Cell]]  # (player, boxes)

STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
SOLVED_BONUS = 10.0
SYMBOLS = "# wall, _ floor, O target, X box, V box on target, P player, S player on target"


class Room:
    """The fixed part of a level: size, walls, targets. Cells outside the interior count as walls."""

    def __init__(self, height: int, width: int, walls: frozenset[Cell], targets: frozenset[Cell]) -> None:
        self.height, self.width, self.walls, self.targets = height, width, walls, targets

    def free(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.height and 0 <= cell[1] < self.width and cell not in self.walls

    def move(self, state: State, action: str) -> State:
        """The state after one move (unchanged when blocked)."""
        player, boxes = state
        step = MOVES[action]
        ahead = shift(player, step)
        if not self.free(ahead):
            return state
        if ahead in boxes:
            beyond = shift(ahead, step)
            if not self.free(beyond) or beyond in boxes:
                return state
            return ahead, (boxes - {ahead}) | {beyond}
        return ahead, boxes

    def dead(self, box: Cell) -> bool:
        """A box off target in a corner can never move again: prune it from the search."""
        if box in self.targets:
            return False
        blocked = [not self.free(shift(box, m)) for m in MOVES.values()]  # up, down, left, right
        return (blocked[0] or blocked[1]) and (blocked[2] or blocked[3])

    def successors(self, state: State) -> Iterator[tuple[str, State]]:
        """Each move and its state, except moves that push a box into a dead corner."""
        for action in ACTIONS:
            nxt = self.move(state, action)
            if not any(self.dead(b) for b in nxt[1] - state[1]):
                yield action, nxt

    def solve(self, state: State, max_depth: Optional[int] = None) -> Optional[list[str]]:
        """A shortest list of moves that puts every box on a target, or None if there is none."""
        return shortest_plan(state, self.successors, lambda s: s[1] <= self.targets, max_depth)

    def render(self, state: State) -> str:
        player, boxes = state
        rows = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                cell = (r, c)
                if cell in self.walls:
                    row.append("#")
                elif cell == player:
                    row.append("S" if cell in self.targets else "P")
                elif cell in boxes:
                    row.append("V" if cell in self.targets else "X")
                else:
                    row.append("O" if cell in self.targets else "_")
            rows.append("".join(row))
        return "\n".join(rows)


def _connected(height: int, width: int, walls: set[Cell]) -> bool:
    floor = [(r, c) for r in range(height) for c in range(width) if (r, c) not in walls]
    inside = lambda cell: 0 <= cell[0] < height and 0 <= cell[1] < width and cell not in walls  # noqa: E731
    return len(flood(floor[0], inside)) == len(floor)


def generate_room(rng: np.random.Generator, size: int, num_boxes: int, inner_walls: tuple[int, int],
                  solution_length: tuple[int, int], reverse_steps: tuple[int, int], pull_probability: float = 0.7,
                  max_tries: int = 2000) -> tuple[Room, State, list[str]]:
    """Play backwards from a solved room; keep the first room whose shortest solution length fits."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    for _ in range(max_tries):
        walls: set[Cell] = set()
        for index in rng.permutation(len(cells))[: int(rng.integers(inner_walls[0], inner_walls[1] + 1))]:
            if _connected(size, size, walls | {cells[index]}):
                walls.add(cells[index])
        floor = [cell for cell in cells if cell not in walls]
        picks = rng.permutation(len(floor))[: num_boxes + 1]
        targets = frozenset(floor[i] for i in picks[:num_boxes])
        room = Room(size, size, frozenset(walls), targets)
        player, boxes = floor[picks[-1]], set(targets)
        for _ in range(int(rng.integers(reverse_steps[0], reverse_steps[1] + 1))):
            step = MOVES[ACTIONS[int(rng.integers(4))]]
            ahead, behind = shift(player, step), (player[0] - step[0], player[1] - step[1])
            if not room.free(ahead) or ahead in boxes:
                continue
            if behind in boxes and rng.random() < pull_probability:
                boxes.remove(behind)
                boxes.add(player)
            player = ahead
        start = (player, frozenset(boxes))
        if start[1] <= targets:
            continue
        plan = room.solve(start, max_depth=solution_length[1])
        if plan is not None and solution_length[0] <= len(plan) <= solution_length[1]:
            return room, start, plan
    raise RuntimeError(f"no Sokoban room with size={size}, num_boxes={num_boxes}, "
                       f"solution_length={solution_length} after {max_tries} tries; widen solution_length "
                       f"or reverse_steps")


class SokobanEnv(GridEnv):
    """Text Sokoban with generated rooms and an optimal expert (see the module docstring)."""

    def __init__(self, size: int = 5, num_boxes: int = 1, inner_walls: Any = (0, 2), solution_length: Any = (3, 10),
                 reverse_steps: Any = (8, 25), invalid_action_penalty: float = INVALID_ACTION_PENALTY,
                 render_mode: Optional[str] = None) -> None:
        super().__init__(invalid_action_penalty, render_mode)
        if size < 3:
            raise ValueError(f"size={size} must be at least 3 (the interior of the room, in cells)")
        if not 1 <= num_boxes <= size * size // 3:
            raise ValueError(f"num_boxes={num_boxes} must be between 1 and a third of size*size")
        self.size, self.num_boxes = size, num_boxes
        self.inner_walls = pair("inner_walls", inner_walls)
        self.solution_length = pair("solution_length", solution_length)
        self.reverse_steps = pair("reverse_steps", reverse_steps)
        self.task = f"Push every box onto a target. Symbols: {SYMBOLS}."
        self.room: Optional[Room] = None
        self.state: Optional[State] = None

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.room, self.state, plan = generate_room(self.np_random, self.size, self.num_boxes, self.inner_walls,
                                                    self.solution_length, self.reverse_steps)
        return self.room.render(self.state), {"optimal_steps": len(plan)}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.room is not None and self.state is not None
        before = len(self.state[1] & self.room.targets)
        self.state = self.room.move(self.state, action)
        after = len(self.state[1] & self.room.targets)
        solved = after == self.num_boxes
        self._won = solved
        reward = STEP_PENALTY + BOX_ON_TARGET * (after - before) + (SOLVED_BONUS if solved else 0.0)
        return self.room.render(self.state), reward, solved, {}

    def plan(self) -> Optional[list[str]]:
        """A shortest solution from here; None once the boxes are stuck for good."""
        assert self.room is not None and self.state is not None, "call reset() first"
        return self.room.solve(self.state)
