"""ALFWorld as a gigpo agent environment, on the real TextWorld PDDL engine.

Description
    A household task in a text world (ALFWorld): "heat some tomato and put it in sinkbasin". The
    agent reads what it sees, picks one of the admissible commands ("go to fridge 1", "take tomato
    1 from countertop 2", ...) and is rewarded when the PDDL goal holds.
Data
    `data_path` (or $ALFWORLD_DATA) names official data (`json_2.1.1/<split>`) or generated tasks
    (`gigpo envs alfworld-generate`); `task_types`, `scene_range` ([first, last] ALFRED scene numbers) and
    `max_walkthrough` (the stored expert run's length) keep a subset (gigpo.envs.alfworld.data.TaskFilter).
    The reset seed picks the task (`seed % num_tasks`) and seeds the `random` stream that TextWorld's
    text grammar and alfworld's expert draw from, so group members reset with one seed play the same
    task with the same texts. Those libraries use
    Python's global `random`; each env swaps its own stream in around every engine call, so
    episodes sharing a worker process do not disturb each other (or the caller's `random`).
Action space
    Free text; the default parser takes `<action>...</action>`. Anything not in the admissible list
    is invalid: reward `-invalid_action_penalty`, the game does not advance.
Reward
    `win_reward` (10, as in the GiGPO paper) on the step that wins, else 0.
Episode end
    terminated when won; truncated by Gymnasium's TimeLimit after `env.max_steps` steps (`max_episode_steps`,
    default 50; invalid ones count); a step after either raises EpisodeOverError.
Anchor
    `anchor="observation"`: the observation text. `anchor="state"`: where the agent is, what it
    holds, what is open, which objects are hot/cool/clean/toggled/sliced and which were moved,
    read from the engine's facts ("Nothing happens." at two places is two states). `anchor="history"`:
    the observation plus the last `anchor_history` (observation, action) pairs that led to it, so equal
    texts reached along different recent paths are different keys (invalid actions, which change nothing,
    are not part of the path).
Prompt
    `prompt="history"` (default): the GiGPO paper's prompt, the task, the last K steps, the current observation
    and the admissible actions. `prompt="memory"`: the task, the receptacles not yet visited (in the room's
    order), what was seen in each visited one, where the agent is and what it holds, the current observation
    and the admissible actions (`info["memory"]`, the `{memory}` template field; gigpo/envs/alfworld/memory.py),
    kept from the texts the agent has read, never from the engine's state or the expert.
Info
    `task_type` (also the env's `task_type` attribute) and `task_path`. With `expert=True`, the
    fixed hand-coded expert's next command is `info["expert_action"]` and `expert_action()` (the
    pool's `expert_actions()` calls it); without, no expert runs and both are None/absent.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Iterator, Literal, Optional, Sequence

from gigpo.envs.alfworld.data import find_tasks
from gigpo.envs.alfworld.game import TaskFiles, expert_action, load_game_data, load_into, make_engine
from gigpo.envs.alfworld.memory import ObservedMemory
from gigpo.envs.base import INVALID_ACTION_PENALTY, AgentEnv, rng_seed

WELCOME_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
TASK_PREFIX = "Your task is to: "
_STATUS_FACTS = {"ishot": "hot", "iscool": "cool", "isclean": "clean", "istoggled": "on", "issliced": "sliced"}


def _args(fact: Any) -> list[str]:
    return [a.name.strip() for a in fact.arguments]


def describe_state(facts: Sequence[Any], initial_placements: frozenset[tuple[str, str]]) -> str:
    """The agent-relevant state in words, from the engine's facts (sorted, so equal states are equal strings)."""
    here = next((_args(f)[1] for f in facts if f.name == "atlocation"), "")
    at = sorted(_args(f)[0] for f in facts if f.name == "receptacleatlocation" and _args(f)[1] == here)
    holding = sorted(_args(f)[1] for f in facts if f.name == "holds")
    opened = sorted(_args(f)[0] for f in facts if f.name == "opened")
    status = sorted(f"{_args(f)[0]} is {_STATUS_FACTS[f.name]}" for f in facts if f.name in _STATUS_FACTS)
    placements = {tuple(_args(f)) for f in facts if f.name == "inreceptacle"}
    moved = sorted(f"{o} in {r}" for o, r in placements - initial_placements)
    parts = [
        f"at: {', '.join(at) or 'the middle of the room'}",
        f"holding: {', '.join(holding) or 'nothing'}",
        f"open: {', '.join(opened) or 'nothing'}",
    ]
    if status:
        parts.append(f"state: {', '.join(status)}")
    if moved:
        parts.append(f"moved: {', '.join(moved)}")
    return " | ".join(parts)


def split_intro(feedback: str) -> tuple[str, str]:
    """The first observation -> (task sentence, room description without banner or task line)."""
    text = feedback.replace(WELCOME_BANNER, "").strip()
    task = ""
    if TASK_PREFIX in text:
        text, _, task = text.partition(TASK_PREFIX)
        task = task.strip()
    return task, text.strip()


class ALFWorldEnv(AgentEnv):
    """ALFWorld household tasks on TextWorld's PDDL engine with alfworld's demangler and expert."""

    #: The GiGPO paper's ALFWorld prompt shape: task, last K steps, current observation, admissible commands.
    prompt_template = (
        "You are an expert agent operating in the ALFRED embodied environment.\n"
        "Your task is to: {task}\n"
        "{history}"
        "Step {step} of {max_steps}. Current observation:\n{observation}\n"
        "{admissible_actions}"
        "{action_format}"
    )
    #: `prompt="memory"`: the episode's observed memory replaces the recent steps (module docstring, "Prompt").
    memory_prompt_template = (
        "You are an expert agent operating in the ALFRED embodied environment.\n"
        "Your task is to: {task}\n"
        "{memory}"
        "Current observation:\n{observation}\n"
        "{admissible_actions}"
        "{action_format}"
    )
    expert_kwarg = "expert"

    def __init__(
        self,
        data_path: Optional[str] = None,
        split: str = "train",
        task_types: Optional[Sequence[str]] = None,
        scene_range: Optional[Sequence[int]] = None,
        max_walkthrough: Optional[int] = None,
        anchor: Literal["observation", "state", "history"] = "observation",
        anchor_history: int = 2,
        prompt: Literal["history", "memory"] = "history",
        expert: bool = False,
        win_reward: float = 10.0,
        invalid_action_penalty: float = INVALID_ACTION_PENALTY,
        render_mode: Optional[str] = None,
    ) -> None:
        super().__init__(invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if anchor not in ("observation", "state", "history"):
            raise ValueError(f"anchor={anchor!r} must be 'observation', 'state' or 'history'")
        if anchor_history < 1:
            raise ValueError(f"anchor_history={anchor_history} must be at least 1 (the pairs before the observation)")
        if prompt not in ("history", "memory"):
            raise ValueError(f"prompt={prompt!r} must be 'history' (the paper's: last K steps) or 'memory' "
                             "(receptacles visited and not, what was seen where, what is held)")
        self.prompt_mode = prompt
        if prompt == "memory":
            self.prompt_template = self.memory_prompt_template
        self.memory: Optional[ObservedMemory] = None
        self.tasks: list[TaskFiles] = find_tasks(data_path, split, task_types, scene_range, max_walkthrough)
        self.split = split
        self.anchor_mode = anchor
        self.anchor_history = int(anchor_history)
        self._path: list[tuple[str, str]] = []  # (observation, action) pairs of the valid steps so far
        self.with_expert = bool(expert)
        self.win_reward = float(win_reward)
        self._engine = make_engine(expert=self.with_expert)
        self._loaded: Optional[TaskFiles] = None
        self._task_files: Optional[TaskFiles] = None
        self._state: Any = None
        self._seed: Optional[int] = None
        self._initial_placements: frozenset[tuple[str, str]] = frozenset()
        self._random_state = random.Random(0).getstate()

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[str, dict[str, Any]]:
        self._seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        return super().step(action)

    # ------------------------------------------------------------------ AgentEnv hooks
    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        episode_seed = self._seed if self._seed is not None else rng_seed(self.np_random)
        index = (options or {}).get("task_index", episode_seed % self.num_tasks)
        if not 0 <= index < self.num_tasks:
            raise ValueError(f"task_index={index} must be in [0, {self.num_tasks})")
        task = self.tasks[index]
        self._random_state = random.Random(episode_seed).getstate()
        with self._own_random():
            if self._loaded is None or self._loaded.path != task.path:
                load_into(self._engine, task, load_game_data(task))
                self._loaded = task
            self._state = self._engine.reset()
        self._task_files = task
        self._initial_placements = frozenset(
            tuple(_args(f)) for f in self._state["facts"] if f.name == "inreceptacle"  # type: ignore[misc]
        )
        self.task, observation = split_intro(self._state["feedback"])
        self._path = []
        self.memory = ObservedMemory.start(observation)
        self.task_type = task.task_type
        return observation, self._extra()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._path.append((self._observation, action))
        with self._own_random():
            self._state, _, _ = self._engine.step(action)
        self._won = bool(self._state["won"])
        assert self.memory is not None
        self.memory.update(action, self._state["feedback"])
        reward = self.win_reward if self._won else 0.0
        return self._state["feedback"].strip(), reward, self._won, self._extra()

    @contextmanager
    def _own_random(self) -> Iterator[None]:
        """Run engine code on this episode's `random` stream; the global one is put back after."""
        outer = random.getstate()
        random.setstate(self._random_state)
        try:
            yield
        finally:
            self._random_state = random.getstate()
            random.setstate(outer)

    def admissible_actions(self) -> Optional[list[str]]:
        return list(self._state["admissible_commands"]) if self._state is not None else None

    def anchor(self) -> str:
        if self.anchor_mode == "state" and self._state is not None:
            return describe_state(self._state["facts"], self._initial_placements)
        if self.anchor_mode == "history":
            recent = self._path[-self.anchor_history:]
            return "\n".join([f"{obs}\n> {act}" for obs, act in recent] + [self._observation])
        return self._observation

    def expert_action(self) -> Optional[str]:
        if not self.with_expert or self._state is None:
            return None
        return expert_action(self._state)

    def _info(self, valid: bool, reason: str, action: Optional[str], extra: dict[str, Any]) -> dict[str, Any]:
        info = super()._info(valid, reason, action, extra)
        if self.prompt_mode == "memory" and self.memory is not None:  # also after an invalid action
            info["memory"] = self.memory.render()
        return info

    def _extra(self) -> dict[str, Any]:
        assert self._task_files is not None
        extra: dict[str, Any] = {"task_type": self._task_files.task_type, "task_path": str(self._task_files.path)}
        if self.with_expert:
            extra["expert_action"] = self.expert_action()
        return extra
