"""Make new ALFWorld tasks offline from the alfworld wheel's floor plans, constants and goal library.

A task is laid out from one AI2-THOR floor plan: its receptacles and their locations come from the
layout files; receptacle types the room has but the layout lacks (stove burners, toasters, garbage
cans, ...) get made-up ids and spots; 1-3 instances of every pickupable object type the room lists
are scattered over compatible receptacles; object properties and `canContain` facts come from
`alfworld.gen.constants`; the goal comes from `alfworld.gen.goal_library`. Every task is played by
the (fixed) hand-coded expert in a staging folder and only moved into place once the expert wins
within `max_steps` under every verification seed; its first winning run is the walkthrough.

Splits: `train` and `valid_seen` draw from ALFRED's training floor plans (different random streams),
`valid_unseen` from ALFRED's held-out floor plans (disjoint scenes). Generation is a pure function of
(seed, split, index): the same arguments write byte-identical files.

These tasks have ALFWorld's text, commands and dynamics, not its object distribution or its
3,553/140/134 task splits: scores on them are not comparable with published ALFWorld numbers.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import alfworld
from alfworld.agents.utils.misc import add_task_to_grammar
from alfworld.gen import constants
from alfworld.gen.goal_library import gdict

from gigpo.envs.alfworld.game import GAME_FILE, MAX_STEPS, TASK_TYPES, TRAJ_FILE, TaskFiles, play_expert
from gigpo.envs.alfworld.scenes import (
    LAMP_TYPES,
    PICKUPABLE_TYPES,
    STATIC_RECEPTACLE_TYPES,
    Receptacle,
    Scene,
    available_scenes,
    load_scene,
)

ALFWORLD_DATA_DIR = Path(alfworld.__file__).parent / "data"
VERIFY_SEEDS = (0, 1)
MAX_ATTEMPTS_PER_TASK = 200

HEAT_SOURCE, COOL_SOURCE = "Microwave", "Fridge"
CLEAN_SOURCES = ("SinkBasin", "BathtubBasin")
#: Where a lamp may stand, in order of preference (it needs a spot no other receptacle shares).
LAMP_STANDS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand", "CounterTop")


@dataclass
class Placement:
    id: str  # ALFRED id, e.g. Apple|+00.21|+00.38|+00.99
    type: str
    receptacle: Receptacle


@dataclass
class Layout:
    scene: Scene
    receptacles: list[Receptacle]
    objects: list[Placement]
    agent_location: tuple[int, int, int, int]


@dataclass(frozen=True)
class Goal:
    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""

    @property
    def folder_name(self) -> str:
        return f"{self.task_type}-{self.object_target}-None-{self.parent_target or self.toggle_target}"

    def pddl_params(self) -> dict:
        return {
            "object_target": self.object_target,
            "parent_target": self.parent_target,
            "mrecep_target": "",
            "toggle_target": self.toggle_target,
            "object_sliced": False,
        }


# --------------------------------------------------------------------------- layout

def _coord(rng: random.Random) -> str:
    value = rng.uniform(-3.0, 3.0)
    return f"{'+' if value >= 0 else '-'}{abs(value):05.2f}"


def _fresh_id(type_name: str, rng: random.Random, taken: set[str], suffix: str = "") -> str:
    while True:
        rid = f"{type_name}|{_coord(rng)}|{_coord(rng)}|{_coord(rng)}{suffix}"
        if rid not in taken:
            taken.add(rid)
            return rid


def _fresh_location(rng: random.Random, used: set[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    xs = [loc[0] for loc in used] or [0]
    zs = [loc[1] for loc in used] or [0]
    while True:
        loc = (rng.randint(min(xs) - 2, max(xs) + 2), rng.randint(min(zs) - 2, max(zs) + 2), rng.randint(0, 3), 30)
        if loc not in used:
            used.add(loc)
            return loc


def build_layout(scene: Scene, rng: random.Random) -> Layout:
    """Receptacles of the floor plan (plus made-up missing ones) with objects scattered over them."""
    receptacles = list(scene.receptacles)
    taken_ids = {r.id for r in receptacles}
    used_locations = {r.location for r in receptacles}
    present = {r.type for r in receptacles}
    for rtype in sorted((scene.object_types & STATIC_RECEPTACLE_TYPES) - present):
        head, suffix = (rtype[: -len("Basin")], f"|{rtype}") if rtype.endswith("Basin") else (rtype, "")
        count = rng.randint(2, 4) if rtype == "StoveBurner" else 1
        for _ in range(count):
            rid = _fresh_id(head, rng, taken_ids, suffix)
            receptacles.append(Receptacle(rid, rtype, _fresh_location(rng, used_locations)))
    receptacles.sort(key=lambda r: r.id)

    by_type: dict[str, list[Receptacle]] = defaultdict(list)
    for r in receptacles:
        by_type[r.type].append(r)
    objects: list[Placement] = []
    for otype in sorted(scene.object_types & PICKUPABLE_TYPES):
        homes = [r for rtype, rs in sorted(by_type.items()) if otype in constants.VAL_RECEPTACLE_OBJECTS[rtype] for r in rs]
        if not homes:
            continue
        for _ in range(rng.randint(1, 3)):
            objects.append(Placement(_fresh_id(otype, rng, taken_ids), otype, rng.choice(homes)))

    # A lamp is used where it stands; the expert breaks if two receptacles share that spot.
    location_count: dict[tuple, int] = defaultdict(int)
    for r in receptacles:
        location_count[r.location] += 1
    for lamp in sorted(scene.object_types & LAMP_TYPES):
        stands = [r for t in LAMP_STANDS for r in by_type.get(t, []) if location_count[r.location] == 1]
        if stands:
            objects.append(Placement(_fresh_id(lamp, rng, taken_ids), lamp, stands[0]))

    objects.sort(key=lambda o: o.id)
    agent = _fresh_location(rng, set(used_locations))
    return Layout(scene, receptacles, objects, agent)


# --------------------------------------------------------------------------- goal

def _types_in(layout: Layout) -> tuple[set[str], set[str]]:
    return {o.type for o in layout.objects}, {r.type for r in layout.receptacles}


def goal_candidates(layout: Layout, task_type: str) -> list[Goal]:
    """Every goal of this type the layout allows, following ALFWorld's trajectory-generator rules."""
    if layout.scene.room not in constants.GOALS_VALID[task_type]:
        return []
    object_types, receptacle_types = _types_in(layout)
    counts: dict[str, int] = defaultdict(int)
    starts_in: dict[str, set[str]] = defaultdict(set)
    for o in layout.objects:
        counts[o.type] += 1
        starts_in[o.type].add(o.receptacle.type)
    movable = sorted(t for t in object_types if t in PICKUPABLE_TYPES)

    if task_type == "look_at_obj_in_light":
        lamps = sorted(object_types & LAMP_TYPES)
        return [Goal(task_type, o, toggle_target=lamp) for lamp in lamps for o in movable]

    def placeable(o: str, exclude: Iterable[str] = ()) -> list[str]:
        return [
            r for r in sorted(receptacle_types)
            if o in constants.VAL_RECEPTACLE_OBJECTS[r] and r not in starts_in[o] and r not in exclude
        ]

    action = constants.VAL_ACTION_OBJECTS
    if task_type == "pick_and_place_simple":
        pairs = [(o, r) for o in movable for r in placeable(o)]
    elif task_type == "pick_two_obj_and_place":
        pairs = [(o, r) for o in movable if counts[o] >= 2 for r in placeable(o)]
    elif task_type == "pick_clean_then_place_in_recep":
        if not receptacle_types & set(CLEAN_SOURCES):
            return []
        pairs = [(o, r) for o in movable if o in action["Cleanable"] for r in placeable(o, CLEAN_SOURCES)]
    elif task_type == "pick_heat_then_place_in_recep":
        if HEAT_SOURCE not in receptacle_types:
            return []
        pairs = [(o, r) for o in movable if o in action["Heatable"] for r in placeable(o, (HEAT_SOURCE,))]
    elif task_type == "pick_cool_then_place_in_recep":
        if COOL_SOURCE not in receptacle_types:
            return []
        pairs = [(o, r) for o in movable if o in action["Coolable"] for r in placeable(o, (COOL_SOURCE,))]
    else:
        raise ValueError(f"task_type={task_type!r} is not one of {', '.join(TASK_TYPES)}")
    return [Goal(task_type, o, parent_target=r) for o, r in pairs]


# --------------------------------------------------------------------------- PDDL

def mangle(name: str) -> str:
    """ALFRED id -> PDDL-safe name, as ALFWorld's game files spell it."""
    for old, new in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_")):
        name = name.replace(old, new)
    return name


def location_name(loc: tuple[int, int, int, int]) -> str:
    return mangle("loc|" + "|".join(str(v) for v in loc))


def pddl_problem(layout: Layout, goal: Goal, problem_name: str) -> str:
    rtypes = sorted(STATIC_RECEPTACLE_TYPES)
    otypes = sorted(set(constants.OBJECTS) - set(rtypes))
    locations = sorted({r.location for r in layout.receptacles} | {layout.agent_location})
    present_objects = sorted({o.type for o in layout.objects})
    present_receptacles = sorted({r.type for r in layout.receptacles})
    action = constants.VAL_ACTION_OBJECTS

    lines = [f"(define (problem {problem_name})", "(:domain alfred)", "(:objects", "        agent1 - agent"]
    lines += [f"        {t}Type - otype" for t in otypes]
    lines += [f"        {t}Type - rtype" for t in rtypes]
    lines += [f"        {mangle(o.id)} - object" for o in layout.objects]
    lines += [f"        {mangle(r.id)} - receptacle" for r in layout.receptacles]
    lines += [f"        {location_name(loc)} - location" for loc in locations]
    lines += ["        )", "(:init"]
    facts: list[str] = []
    facts += [f"(receptacleType {mangle(r.id)} {r.type}Type)" for r in layout.receptacles]
    facts += [f"(objectType {mangle(o.id)} {o.type}Type)" for o in layout.objects]
    facts += [
        f"(canContain {r}Type {o}Type)"
        for r in present_receptacles for o in present_objects if o in constants.VAL_RECEPTACLE_OBJECTS[r]
    ]
    for o in layout.objects:
        name = mangle(o.id)
        if o.type in PICKUPABLE_TYPES:
            facts.append(f"(pickupable {name})")
        if o.type in constants.MOVABLE_RECEPTACLES:
            facts.append(f"(isReceptacleObject {name})")
        for prop, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                          ("sliceable", "Sliceable"), ("toggleable", "Toggleable")):
            if o.type in action[key]:
                facts.append(f"({prop} {name})")
    facts += [f"(openable {mangle(r.id)})" for r in layout.receptacles if r.type in constants.OPENABLE_CLASS_SET]
    facts.append(f"(atLocation agent1 {location_name(layout.agent_location)})")
    facts += [f"(inReceptacle {mangle(o.id)} {mangle(o.receptacle.id)})" for o in layout.objects]
    facts += [f"(receptacleAtLocation {mangle(r.id)} {location_name(r.location)})" for r in layout.receptacles]
    facts += [f"(objectAtLocation {mangle(o.id)} {location_name(o.receptacle.location)})" for o in layout.objects]
    lines += [f"        {fact}" for fact in facts]
    lines.append("        )")
    goal_pddl = gdict[goal.task_type]["pddl"].replace("#", "-").format(
        obj=goal.object_target, recep=goal.parent_target, toggle=goal.toggle_target, mrecep=""
    )
    return "\n".join(lines) + "\n" + goal_pddl


# --------------------------------------------------------------------------- one task

def task_seed(seed: int, split: str, index: int, attempt: int) -> int:
    digest = hashlib.sha256(f"gigpo-alfworld/{seed}/{split}/{index}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=1) + "\n"


def try_task(
    task_type: str, scenes: Sequence[int], rng_seed: int, staging: Path, max_steps: int
) -> Optional[tuple[str, str]]:
    """Lay out one task of this type in `staging`; return (task folder, trial name) if the expert solves it."""
    rng = random.Random(rng_seed)
    scene = load_scene(rng.choice([s for s in scenes if load_scene(s).room in constants.GOALS_VALID[task_type]]))
    layout = build_layout(scene, rng)
    candidates = goal_candidates(layout, task_type)
    if not candidates:
        return None
    goal = rng.choice(candidates)
    trial = f"trial_gen_{rng_seed:019d}"
    traj = {
        "task_id": trial,
        "task_type": task_type,
        "pddl_params": goal.pddl_params(),
        "scene": {"floor_plan": f"FloorPlan{scene.number}", "scene_num": scene.number, "random_seed": rng_seed},
        "turk_annotations": {"anns": []},
        "generator": "gigpo envs alfworld-generate (not an official ALFWorld task)",
    }
    game = {
        "pddl_domain": (ALFWORLD_DATA_DIR / "alfred.pddl").read_text(),
        "grammar": (ALFWORLD_DATA_DIR / "alfred.twl2").read_text(),
        "pddl_problem": pddl_problem(layout, goal, f"plan_{trial}"),
        "solvable": False,
        "walkthrough": [],
    }
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    (staging / TRAJ_FILE).write_text(_dump(traj))
    # Fill the goal sentence now, like ALFWorld's own game files (its templater uses global random).
    random.seed(rng_seed)
    game["grammar"] = add_task_to_grammar(game["grammar"], traj)
    # The expert reads the task from traj_data.json; the game file is written only once it is solved.
    task = TaskFiles(staging, task_type, traj["pddl_params"], generated=True)
    walkthrough = play_expert(task, game, max_steps, seeds=VERIFY_SEEDS)
    if walkthrough is None:
        return None
    game["solvable"] = True
    game["walkthrough"] = walkthrough
    (staging / GAME_FILE).write_text(_dump(game))
    return f"{goal.folder_name}-{scene.number}", trial


# --------------------------------------------------------------------------- many tasks

def generate_tasks(
    out: str | Path,
    n: int,
    seed: int = 0,
    split: str = "train",
    task_types: Sequence[str] = TASK_TYPES,
    max_steps: int = MAX_STEPS,
    start: int = 0,
    progress: Optional[Callable[[int], None]] = None,
) -> list[Path]:
    """Write tasks number start..start+n-1 to `out/<split>/<task folder>/<trial>/`, cycling through task_types.

    Task i depends only on (seed, split, i, task_types[i % len(task_types)]), so shards written with
    different `start` values add up to the same set as one run. Returns the trial folders written.
    """
    if n < 1:
        raise ValueError(f"n={n} must be at least 1")
    if start < 0:
        raise ValueError(f"start={start} must be at least 0")
    unknown = [t for t in task_types if t not in TASK_TYPES]
    if unknown or not task_types:
        raise ValueError(f"task_types={list(task_types)} must be a non-empty subset of {', '.join(TASK_TYPES)}")
    scenes = available_scenes(split)
    outer_random = random.getstate()  # alfworld's templater and expert use the global stream
    try:
        return _generate(Path(out), n, seed, split, list(task_types), max_steps, start, scenes, progress)
    finally:
        random.setstate(outer_random)


def _generate(
    out: Path, n: int, seed: int, split: str, task_types: list[str], max_steps: int, start: int,
    scenes: list[int], progress: Optional[Callable[[int], None]],
) -> list[Path]:
    split_dir = out / split
    staging_root = out / f".staging-{split}-{start}"
    written: list[Path] = []
    for index in range(start, start + n):
        task_type = task_types[index % len(task_types)]
        for attempt in range(MAX_ATTEMPTS_PER_TASK):
            result = try_task(task_type, scenes, task_seed(seed, split, index, attempt), staging_root / "task", max_steps)
            if result is not None:
                break
        else:
            raise RuntimeError(
                f"no {task_type} task the expert solves in {max_steps} steps after {MAX_ATTEMPTS_PER_TASK} "
                f"layouts (split={split}, seed={seed}, index={index}); raise max_steps"
            )
        folder, trial = result
        final = split_dir / folder / trial
        if final.exists():
            shutil.rmtree(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging_root / "task"), str(final))
        written.append(final)
        if progress is not None:
            progress(1)
    shutil.rmtree(staging_root, ignore_errors=True)
    return written
