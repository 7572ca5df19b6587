"""Stock Gymnasium toy-text envs (discrete states and actions) as agent envs: a renderer plus action names.

`DiscreteTextEnv` wraps any env whose observation and action spaces are `Discrete`; the factories
below ship FrozenLake, CliffWalking and Taxi. The inner env is used unwrapped: truncation comes from
the TimeLimit that `gymnasium.make(..., max_episode_steps=)` puts around the agent env.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional

import gymnasium as gym
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from gigpo.envs.base import INVALID_ACTION_PENALTY, AgentEnv, rng_seed

#: (inner env, its state) -> the observation text
Renderer = Callable[[gym.Env, int], str]
#: (inner env, its state, last reward, terminated) -> whether the task is solved
WinTest = Callable[[gym.Env, int, float, bool], bool]
#: (inner env, its state) -> index of an expert's action, or None (no expert, or no way to win)
Expert = Callable[[gym.Env, int], Optional[int]]


def _terminated(inner: gym.Env, state: int, reward: float, terminated: bool) -> bool:
    return terminated


class DiscreteTextEnv(AgentEnv):
    """An agent env over a Gymnasium env with Discrete observations and actions."""

    def __init__(self, inner: gym.Env, action_names: list[str], render_state: Renderer, task: str,
                 won: WinTest = _terminated, expert: Optional[Expert] = None,
                 invalid_action_penalty: float = INVALID_ACTION_PENALTY, render_mode: Optional[str] = None) -> None:
        super().__init__(invalid_action_penalty, render_mode)
        inner = inner.unwrapped
        for name, space in (("observation", inner.observation_space), ("action", inner.action_space)):
            if not isinstance(space, gym.spaces.Discrete):
                raise TypeError(f"{type(inner).__name__} has a {type(space).__name__} {name} space; "
                                f"DiscreteTextEnv needs Discrete spaces")
        if len(action_names) != inner.action_space.n or len(set(action_names)) != len(action_names):
            raise ValueError(f"action_names={action_names} must be {inner.action_space.n} distinct names, "
                             f"one per action of {type(inner).__name__}")
        self.inner, self.action_names, self.render_state, self.is_won = inner, list(action_names), render_state, won
        self.expert = expert
        self.task = task
        self.state = 0

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.state, _ = self.inner.reset(seed=rng_seed(self.np_random))
        return self.render_state(self.inner, int(self.state)), {}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.state, reward, terminated, _, _ = self.inner.step(self.action_names.index(action))
        self._won = self.is_won(self.inner, int(self.state), float(reward), bool(terminated))
        return self.render_state(self.inner, int(self.state)), float(reward), bool(terminated), {}

    def admissible_actions(self) -> list[str]:
        return list(self.action_names)

    def expert_action(self) -> Optional[str]:
        if self.expert is None:
            return None
        index = self.expert(self.inner, int(self.state))
        return None if index is None else self.action_names[index]

    def close(self) -> None:
        self.inner.close()


# --------------------------------------------------------------------------- FrozenLake

def _render_lake(inner: gym.Env, state: int) -> str:
    rows = [[c.decode() for c in row] for row in inner.desc]
    row, col = divmod(state, inner.ncol)
    rows[row][col] = "P"
    return "\n".join("".join(r) for r in rows)


# FrozenLake's action indices: 0 left, 1 down, 2 right, 3 up
_LAKE_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))


def lake_expert(inner: gym.Env, state: int) -> Optional[int]:
    """First move of a shortest hole-free path to G (breadth-first search), or None if none exists.

    Optimal on non-slippery ice; on slippery ice it is the path a careful walker would aim for.
    """
    desc, nrow, ncol = inner.desc, inner.nrow, inner.ncol
    start = divmod(state, ncol)
    first: dict[tuple[int, int], Optional[int]] = {start: None}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        if desc[cell[0]][cell[1]] == b"G":
            return first[cell]
        if desc[cell[0]][cell[1]] == b"H":
            continue
        for action, (dr, dc) in enumerate(_LAKE_MOVES):
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < nrow and 0 <= nxt[1] < ncol and nxt not in first:
                first[nxt] = action if first[cell] is None else first[cell]
                frontier.append(nxt)
    return None


class _RandomLakeEnv(DiscreteTextEnv):
    """FrozenLake on a fresh random map per seed (all members of a group get the same map)."""

    def __init__(self, map_size: int, is_slippery: bool, **kwargs: Any) -> None:
        self.map_size, self.is_slippery = map_size, is_slippery
        super().__init__(self._lake(None), **kwargs)

    def _lake(self, seed: Optional[int]) -> gym.Env:
        desc = generate_random_map(size=self.map_size, seed=seed)
        return gym.make("FrozenLake-v1", desc=desc, is_slippery=self.is_slippery).unwrapped

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.inner = self._lake(rng_seed(self.np_random))
        return super()._reset(options)


def frozen_lake(is_slippery: bool = False, map_name: str = "4x4", map_size: Optional[int] = None,
                **kwargs: Any) -> DiscreteTextEnv:
    """FrozenLake; `map_size=N` draws a random N x N lake per seed instead of the fixed `map_name` map."""
    task = ("Walk from S to the goal G over the frozen lake without falling into a hole H. "
            "P is you, F is safe ice." + (" The ice is slippery: you may slide sideways." if is_slippery else ""))
    common = dict(action_names=["left", "down", "right", "up"], render_state=_render_lake, task=task,
                  won=lambda inner, state, reward, terminated: reward > 0, expert=lake_expert, **kwargs)
    if map_size is not None:
        if map_size < 2:
            raise ValueError(f"map_size={map_size} must be at least 2")
        return _RandomLakeEnv(map_size, is_slippery, **common)
    return DiscreteTextEnv(gym.make("FrozenLake-v1", map_name=map_name, is_slippery=is_slippery), **common)


# --------------------------------------------------------------------------- CliffWalking

def _render_cliff(inner: gym.Env, state: int) -> str:
    height, width = inner.shape
    rows = [["_"] * width for _ in range(height)]
    rows[height - 1] = ["S"] + ["C"] * (width - 2) + ["G"]
    row, col = divmod(state, width)
    rows[row][col] = "P"
    return "\n".join("".join(r) for r in rows)


def cliff_walking(**kwargs: Any) -> DiscreteTextEnv:
    """CliffWalking: every step costs 1, stepping on the cliff C costs 100 and sends you back to S."""
    task = ("Walk from S to the goal G. P is you, _ is safe ground. Stepping on the cliff C costs 100 and "
            "sends you back to S; every step costs 1.")
    return DiscreteTextEnv(gym.make("CliffWalking-v1"), ["up", "right", "down", "left"], _render_cliff, task,
                           **kwargs)


# --------------------------------------------------------------------------- Taxi

_TAXI_STOPS = "RGYB"


def _render_taxi(inner: gym.Env, state: int) -> str:
    taxi_row, taxi_col, passenger, destination = inner.decode(state)
    rows = [[c.decode() for c in row] for row in inner.desc]
    rows[1 + taxi_row][1 + 2 * taxi_col] = "@"
    where = "in the taxi" if passenger == 4 else f"at {_TAXI_STOPS[passenger]}"
    return "\n".join("".join(r) for r in rows) + f"\nPassenger {where}, destination {_TAXI_STOPS[destination]}."


def taxi(**kwargs: Any) -> DiscreteTextEnv:
    """Taxi: pick the passenger up at one stop and drop them off at another (+20; -1 a step, -10 misuse)."""
    task = ("Drive the taxi @ to the passenger, pick them up, then drop them off at the destination. "
            "R, G, Y, B are the stops; you cannot drive through |. Each step costs 1; a wrong pickup or "
            "dropoff costs 10; the right dropoff earns 20.")
    return DiscreteTextEnv(gym.make("Taxi-v4"), ["south", "north", "east", "west", "pickup", "dropoff"],
                           _render_taxi, task, **kwargs)
