"""Load one ALFWorld task folder into the real engine: TextWorld's PDDL env + alfworld's wrappers.

The stack is `PddlEnv` (the PDDL engine, Fast Downward's successor generator) under alfworld's
`AlfredDemangler` (encoded ALFRED ids -> "mug 1") and, when asked, `AlfredExpert` (the hand-coded
expert, which puts its next command in `extra.expert_plan`). We subclass the expert to fix two
faults of alfworld 0.4.2:
- the grammar emits "move X to Y" but the expert's state tracker only recognises "put", so it loses
  track of what it holds and fails pick-two and some clean tasks;
- its list of receptacles to search is rebuilt from the whole room at every search subgoal, so after
  finding the object it searches again, for the lamp or the second object, receptacles it has already
  looked into (a `look_at_obj_in_light` sample: 32 steps, 11 of them re-searching). `SearchOnce` drops
  from a new search list every receptacle the expert has looked into without seeing the class it seeks.
  Demonstrations then never search a receptacle twice for the same object.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Sequence

import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert
from alfworld.agents.expert import HandCodedTWAgent
from alfworld.agents.expert.handcoded_expert import BasePolicy
from alfworld.agents.utils.misc import add_task_to_grammar
from textworld.envs import PddlEnv

from gigpo.envs.alfworld.spec import GAME_FILE, MAX_STEPS, SPLITS, TASK_TYPES, TRAJ_FILE  # noqa: F401  (re-exported)

EXPERT_MAX_STEPS = 200


class SearchOnce:
    """Mixin over one of alfworld's hand-coded task policies: a search never goes back to a receptacle
    the policy has already looked into and seen without the class it now seeks.

    The policy assigns `receptacles_to_check` whenever it starts a search (the whole room, its priors
    last) and pops from it; a property filters each new list. What was looked into is recorded in
    `observe`, from the text that shows a receptacle's contents ("On the X, you see ...", "The X is
    open. In it, you see ..."). If the filter would leave nothing (every receptacle looked into), the list
    stays whole: searching again beats giving up. Searches for a receptacle type (where to put the
    object) are not filtered: any receptacle of the type will do.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._looked_inside: dict[str, set[str]] = {}  # receptacle -> object classes seen in it
        self._to_check: list[str] = []
        super().__init__(*args, **kwargs)

    @property
    def receptacles_to_check(self) -> list[str]:
        return self._to_check

    @receptacles_to_check.setter
    def receptacles_to_check(self, receptacles: list[str]) -> None:
        sought = self._sought_object_class()
        kept = [r for r in receptacles
                if sought is None or r not in self._looked_inside or sought in self._looked_inside[r]]
        self._to_check = kept or list(receptacles)

    def _sought_object_class(self) -> Optional[str]:
        policy: Any = self
        subgoals, index = getattr(policy, "subgoals", []), getattr(policy, "subgoal_idx", 0)
        if not 0 <= index < len(subgoals) or subgoals[index]["action"] != "find":
            return None
        sought = subgoals[index]["param"]
        return None if sought in BasePolicy.RECEPTACLES else sought

    def observe(self, obs: str) -> None:
        super().observe(obs)  # type: ignore[misc]
        policy: Any = self
        here = policy.curr_recep
        if here and (f"On the {here}, you see" in obs or f"The {here} is open. In it, you see" in obs):
            self._looked_inside[here] = {policy.object_id_to_cls(o) for o in policy.visible_objects}


@lru_cache(maxsize=None)
def _search_once(policy_class: type) -> type:
    return type(f"{policy_class.__name__}SearchOnce", (SearchOnce, policy_class), {})


class SearchOnceTWAgent(HandCodedTWAgent):
    """alfworld's hand-coded TextWorld agent whose task policies search each receptacle once (`SearchOnce`)."""

    def get_task_policy(self, task_param: dict[str, Any]) -> type:
        return _search_once(super().get_task_policy(task_param))


class FixedAlfredExpert(AlfredExpert):
    """alfworld's hand-coded expert with the "move"/"put" mismatch fixed, loadable from game data, and
    (`search_once`, the default) the re-search fixed.

    `load(game_data, task_dir)` takes the parsed game (so a goal can be filled into the grammar in
    memory) and the folder whose traj_data.json tells the expert what the task is.
    """

    search_once: bool = True

    def load(self, game_data: dict[str, Any], task_dir: str) -> None:  # type: ignore[override]
        textworld.core.Wrapper.load(self, game_data)
        # HandCodedAgent.reset reads dirname(gamefile)/traj_data.json.
        self.gamefile = str(Path(task_dir) / GAME_FILE)
        self.request_infos.facts = True
        agent_class = SearchOnceTWAgent if self.search_once else HandCodedTWAgent
        self._handcoded_expert = agent_class(max_steps=EXPERT_MAX_STEPS)

    def step(self, command: str):
        self.state, reward, done = textworld.core.Wrapper.step(self, command)
        command = str(command)
        # The tracker pops its inventory only on "put ..."; the grammar says "move ... to ...".
        self.prev_command = "put " + command[len("move "):] if command.startswith("move ") else command
        self._gather_infos()
        return self.state, reward, done

    def _gather_infos(self) -> None:
        try:
            super()._gather_infos()
        except Exception as exc:  # HandCodedAgentTimeout/Failed are NameError subclasses, "Timeout" is bare
            self.state["extra.expert_plan"] = []
            self.state["extra.expert_error"] = f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class TaskFiles:
    """One task folder: traj_data.json + game.tw-pddl, plus what we read from traj_data."""

    path: Path
    task_type: str
    pddl_params: dict[str, Any]
    generated: bool = False
    """Made by `gigpo envs alfworld-generate`, not an official ALFWorld task."""
    scene: Optional[int] = None
    """ALFRED floor plan number (traj_data's `scene.scene_num`): 1-30 kitchens, 201-230 living rooms,
    301-330 bedrooms, 401-430 bathrooms; None if the file does not say."""

    @classmethod
    def read(cls, folder: str | Path) -> "TaskFiles":
        folder = Path(folder)
        traj_path, game_path = folder / TRAJ_FILE, folder / GAME_FILE
        if not traj_path.is_file() or not game_path.is_file():
            raise FileNotFoundError(f"{folder} is not an ALFWorld task folder: it needs {TRAJ_FILE} and {GAME_FILE}")
        traj = json.loads(traj_path.read_text())
        scene = (traj.get("scene") or {}).get("scene_num")
        return cls(folder, traj["task_type"], traj["pddl_params"], "generator" in traj,
                   int(scene) if scene is not None else None)


def load_game_data(task: TaskFiles) -> dict[str, Any]:
    """The game JSON, with the goal sentence filled in if the file still says "UNKNOWN GOAL".

    alfworld's templater picks a sentence with the global `random`; we seed it from the task's
    folder names (and restore it after), so a task reads the same in every episode and process.
    """
    data = json.loads((task.path / GAME_FILE).read_text())
    if "UNKNOWN GOAL" in data["grammar"]:
        traj = json.loads((task.path / TRAJ_FILE).read_text())
        outer = random.getstate()
        random.seed(f"{task.path.parent.name}/{task.path.name}")
        try:
            data["grammar"] = add_task_to_grammar(data["grammar"], traj)
        finally:
            random.setstate(outer)
    return data


_uncached_pddl2sas = fast_downward.pddl2sas


@lru_cache(maxsize=16)
def _memo_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
    return _uncached_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)


def use_translation_cache() -> None:
    """Memoise Fast Downward's PDDL -> SAS translation in this process (idempotent).

    TextWorld translates the problem twice per `PddlState` (plain and optimised for replanning), and
    `PddlEnv` builds a state at load and again at every reset: ~0.3-0.7 s of pure-Python work each,
    four times per episode, for a result that depends only on the (domain, problem) texts. The
    result is only read afterwards (actions' parameters, types, objects, initial atoms; the SAS
    text goes to each env's private copy of the C library), so group members of one task can share it.
    """
    fast_downward.pddl2sas = _memo_pddl2sas


def make_engine(expert: bool, search_once: bool = True) -> textworld.core.Environment:
    """PddlEnv -> AlfredDemangler [-> FixedAlfredExpert], asking for what the agent env reports.

    `search_once=False` keeps the expert's re-search (the generator's check, see `play_expert`)."""
    use_translation_cache()
    infos = textworld.EnvInfos(admissible_commands=True, won=True, facts=True, extras=["expert_plan"] if expert else [])
    env: textworld.core.Environment = AlfredDemangler(PddlEnv(infos))
    if expert:
        env = FixedAlfredExpert(env)
        env.search_once = search_once
    return env


def load_into(engine: textworld.core.Environment, task: TaskFiles, data: dict[str, Any]) -> None:
    if isinstance(engine, FixedAlfredExpert):
        engine.load(data, str(task.path))
    else:
        engine.load(data)


def expert_action(state: Any) -> Optional[str]:
    plan = state.get("extra.expert_plan") or []
    return plan[0] if plan else None


def play_expert(task: TaskFiles, data: dict[str, Any], max_steps: int, seeds: Sequence[int] = (0,),
                search_once: bool = False) -> Optional[list[str]]:
    """Run the fixed expert once per seed (global `random` seeded with it) on one loaded game.

    Returns the first run's commands if the expert wins within max_steps under every seed, else None.
    The generator calls it with `search_once=False`, the expert it was written with: the tasks it accepts
    and the walkthroughs it stores stay byte-identical to those already generated and cached.
    """
    engine = make_engine(expert=True, search_once=search_once)
    load_into(engine, task, data)
    first: Optional[list[str]] = None
    for seed in seeds:
        random.seed(seed)
        state = engine.reset()
        commands: list[str] = []
        while not state["won"] and len(commands) < max_steps:
            command = expert_action(state)
            if command is None:
                return None
            state, _, _ = engine.step(command)
            commands.append(command)
        if not state["won"]:
            return None
        first = first if first is not None else commands
    return first
