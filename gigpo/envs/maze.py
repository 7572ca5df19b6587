"""Random mazes as text: walk to the goal, first fetching the key that opens a door on the way.

Description
    A perfect maze (one path between any two cells) is carved by a randomised depth-first search on a
    grid of cells, then `loops` extra walls are knocked out so that some places can be reached in
    several ways. With `doors=1` a door closes a passage that every way from the start to the goal
    crosses, and a key lies on the start's side: the agent must walk to the key, then through the
    door, then to the goal. A maze is kept only if its shortest solution (a breadth-first search over
    position, key and door) has a length in `solution_length`; that search is also the expert.
    Reward comes only at the end, walls make no-op moves, and corridors lead into dead ends, so
    trajectories revisit their own states: the setting GiGPO's step groups are made for.
Observation
    The maze interior, one symbol per cell, one line per row (the outer wall is implied):
    ``# wall  _ floor  P player  G goal  K key  D closed door``. The key disappears once picked up
    and the door once opened, so the text alone identifies the state (it is the GiGPO anchor).
Actions
    ``up``, ``down``, ``left``, ``right``. Walking into a wall, or into the door without the key, is
    a valid no-op. Stepping onto the key picks it up; walking into the door with it opens the door
    (using the key up) and moves through.
Reward
    -`step_penalty` per step (default 0.1), +`goal_reward` (default 10) on reaching the goal.
Episode end
    Terminated on reaching the goal; truncated by Gymnasium's TimeLimit (`max_episode_steps`).
Version history
    v0: first version.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np

from gigpo.envs.base import INVALID_ACTION_PENALTY
from gigpo.envs.grid import ACTIONS, MOVES, Cell, GridEnv, flood, pair, shift, shortest_plan

SYMBOLS = "# wall, _ floor, P player, G goal, K key, D closed door"


@dataclass(frozen=True)
class MazeState:
    player: Cell
    has_key: bool
    key_taken: bool
    door_open: bool


@dataclass(frozen=True)
class Layout:
    """The fixed part of a maze: its size, open cells, goal, and where key and door are (None without)."""

    size: int
    open_cells: frozenset[Cell]
    goal: Cell
    key: Optional[Cell] = None
    door: Optional[Cell] = None

    def move(self, state: MazeState, action: str) -> MazeState:
        """The state after one move (unchanged when blocked)."""
        ahead = shift(state.player, MOVES[action])
        if ahead not in self.open_cells:
            return state
        if ahead == self.door and not state.door_open:
            if not state.has_key:
                return state
            return MazeState(ahead, False, state.key_taken, True)
        if ahead == self.key and not state.key_taken:
            return MazeState(ahead, True, True, state.door_open)
        return MazeState(ahead, state.has_key, state.key_taken, state.door_open)

    def successors(self, state: MazeState) -> Iterator[tuple[str, MazeState]]:
        return ((action, self.move(state, action)) for action in ACTIONS)

    def solve(self, state: MazeState) -> Optional[list[str]]:
        """A shortest list of moves from `state` to the goal, or None if there is none."""
        return shortest_plan(state, self.successors, lambda s: s.player == self.goal)

    def render(self, state: MazeState) -> str:
        rows = []
        for r in range(self.size):
            row = []
            for c in range(self.size):
                cell = (r, c)
                if cell == state.player:
                    row.append("P")
                elif cell not in self.open_cells:
                    row.append("#")
                elif cell == self.goal:
                    row.append("G")
                elif cell == self.key and not state.key_taken:
                    row.append("K")
                elif cell == self.door and not state.door_open:
                    row.append("D")
                else:
                    row.append("_")
            rows.append("".join(row))
        return "\n".join(rows)


def carve(rng: np.random.Generator, size: int, loops: int) -> set[Cell]:
    """Open cells of a maze on a size x size grid: rooms at even coordinates, passages between them."""
    rooms = [(r, c) for r in range(0, size, 2) for c in range(0, size, 2)]
    start = rooms[int(rng.integers(len(rooms)))]
    open_cells, stack = {start}, [start]
    while stack:
        here = stack[-1]
        options = [(dr, dc) for dr, dc in MOVES.values()
                   if 0 <= here[0] + 2 * dr < size and 0 <= here[1] + 2 * dc < size
                   and (here[0] + 2 * dr, here[1] + 2 * dc) not in open_cells]
        if not options:
            stack.pop()
            continue
        dr, dc = options[int(rng.integers(len(options)))]
        open_cells |= {(here[0] + dr, here[1] + dc), (here[0] + 2 * dr, here[1] + 2 * dc)}
        stack.append((here[0] + 2 * dr, here[1] + 2 * dc))
    walls = [(r, c) for r in range(size) for c in range(size) if (r + c) % 2 == 1 and (r, c) not in open_cells]
    for index in rng.permutation(len(walls))[:loops]:
        open_cells.add(walls[index])
    return open_cells


def _reachable(open_cells: set[Cell], start: Cell, blocked: Optional[Cell] = None) -> set[Cell]:
    return flood(start, lambda cell: cell in open_cells and cell != blocked)


def generate_maze(rng: np.random.Generator, size: int, loops: int, doors: int, solution_length: tuple[int, int],
                  max_tries: int = 500) -> tuple[Layout, MazeState, list[str]]:
    """Carve mazes until one has a shortest solution whose length lies in `solution_length`."""
    for _ in range(max_tries):
        open_cells = carve(rng, size, loops)
        rooms = sorted(c for c in open_cells if c[0] % 2 == 0 and c[1] % 2 == 0)
        start, goal = (rooms[i] for i in rng.choice(len(rooms), size=2, replace=False))
        key = door = None
        if doors:
            # a passage every way to the goal crosses: blocking it cuts the start off from the goal
            plan = Layout(size, frozenset(open_cells), goal).solve(MazeState(start, False, False, False)) or []
            path, cell = [], start
            for action in plan:
                cell = shift(cell, MOVES[action])
                path.append(cell)
            cuts = [c for c in path[:-1] if (c[0] + c[1]) % 2 == 1 and goal not in _reachable(open_cells, start, c)]
            if not cuts:
                continue
            door = cuts[int(rng.integers(len(cuts)))]
            near = sorted(_reachable(open_cells, start, door) - {start})
            if not near:
                continue
            key = near[int(rng.integers(len(near)))]
        layout = Layout(size, frozenset(open_cells), goal, key, door)
        state = MazeState(start, False, False, False)
        plan = layout.solve(state)
        if plan is not None and solution_length[0] <= len(plan) <= solution_length[1]:
            return layout, state, plan
    raise RuntimeError(f"no maze with size={size}, loops={loops}, doors={doors}, solution_length={solution_length} "
                       f"after {max_tries} tries; widen solution_length or change size")


class MazeEnv(GridEnv):
    """Text maze with an optional key and door, and an optimal expert (see the module docstring)."""

    def __init__(self, size: int = 7, loops: int = 2, doors: int = 1, solution_length: Any = (8, 24),
                 step_penalty: float = 0.1, goal_reward: float = 10.0,
                 invalid_action_penalty: float = INVALID_ACTION_PENALTY, render_mode: Optional[str] = None) -> None:
        super().__init__(invalid_action_penalty, render_mode)
        if size < 3 or size % 2 == 0:
            raise ValueError(f"size={size} must be an odd number >= 3 (rooms sit at even coordinates)")
        if loops < 0:
            raise ValueError(f"loops={loops} must be >= 0 (extra walls knocked out)")
        if doors not in (0, 1):
            raise ValueError(f"doors={doors} must be 0 or 1")
        self.size, self.loops, self.doors = size, loops, doors
        self.solution_length = pair("solution_length", solution_length)
        self.step_penalty, self.goal_reward = float(step_penalty), float(goal_reward)
        self.task = ("Walk to the goal G." + (" The door D is locked: first pick up the key K by walking onto it, "
                                               "then walk through the door." if doors else "")
                     + f" Symbols: {SYMBOLS}.")
        self.layout: Optional[Layout] = None
        self.state: Optional[MazeState] = None

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.layout, self.state, plan = generate_maze(self.np_random, self.size, self.loops, self.doors,
                                                      self.solution_length)
        return self.layout.render(self.state), {"optimal_steps": len(plan)}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.layout is not None and self.state is not None
        self.state = self.layout.move(self.state, action)
        solved = self.state.player == self.layout.goal
        self._won = solved
        reward = -self.step_penalty + (self.goal_reward if solved else 0.0)
        return self.layout.render(self.state), reward, solved, {}

    def plan(self) -> Optional[list[str]]:
        """A shortest solution from here (every maze stays solvable: empty only at the goal)."""
        assert self.layout is not None and self.state is not None, "call reset() first"
        return self.layout.solve(self.state)
