"""Read an AI2-THOR floor plan from the alfworld wheel: its receptacles, their locations, and its object types.

The wheel ships `alfworld/gen/layouts/FloorPlanN-openable.json` (receptacle id -> [x, z, rotation,
horizon] of the spot the agent stands at) and `FloorPlanN-objects.json` (types present in the room).
That is all the generator needs to lay out a text game: which receptacles exist and where, and
which object types may be scattered over them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import alfworld.gen
from alfworld.gen import constants

LAYOUT_DIR = Path(alfworld.gen.__file__).parent / "layouts"

#: Receptacle types that stay put in a room (movable ones like Bowl or Pot are objects here).
STATIC_RECEPTACLE_TYPES = frozenset(constants.VAL_RECEPTACLE_OBJECTS) - frozenset(constants.MOVABLE_RECEPTACLES)
#: Things an agent can pick up: whatever some receptacle accepts.
PICKUPABLE_TYPES = frozenset(o for objs in constants.VAL_RECEPTACLE_OBJECTS.values() for o in objs)
LAMP_TYPES = frozenset(constants.VAL_ACTION_OBJECTS["Toggleable"])


@dataclass(frozen=True)
class Receptacle:
    """A receptacle instance: ALFRED id (`Type|x|y|z`, sinks `Sink|x|y|z|SinkBasin`), type, grid spot."""

    id: str
    type: str
    location: tuple[int, int, int, int]  # (x / 0.25, z / 0.25, rotation / 90, horizon)


@dataclass(frozen=True)
class Scene:
    number: int
    room: str  # Kitchen, LivingRoom, Bedroom, Bathroom
    receptacles: tuple[Receptacle, ...]  # from openable.json, sorted by id
    object_types: frozenset[str]  # every type objects.json lists


def room_of(scene: int) -> str:
    for room, numbers in constants.SCENE_TYPE.items():
        if scene in numbers:
            return room
    raise ValueError(f"scene={scene} is not an ALFRED floor plan number (1-30, 201-230, 301-330, 401-430)")


def receptacle_type(receptacle_id: str) -> str:
    """`Sink|...|SinkBasin` -> SinkBasin (the basin is what holds things), `Cabinet|...` -> Cabinet."""
    parts = receptacle_id.split("|")
    return parts[-1] if parts[-1].endswith("Basin") else parts[0]


def grid_location(x: float, z: float, rotation: float, horizon: float) -> tuple[int, int, int, int]:
    return (int(round(x / 0.25)), int(round(z / 0.25)), int(round(rotation / 90)) % 4, int(round(horizon)))


@lru_cache(maxsize=None)
def load_scene(number: int) -> Scene:
    openable_path = LAYOUT_DIR / f"FloorPlan{number}-openable.json"
    objects_path = LAYOUT_DIR / f"FloorPlan{number}-objects.json"
    if not openable_path.is_file() or not objects_path.is_file():
        raise FileNotFoundError(f"no layout for scene {number} in {LAYOUT_DIR}")
    openable = json.loads(openable_path.read_text())
    receptacles = []
    for rid in sorted(openable):
        rtype = receptacle_type(rid)
        head = rid.split("|")[0]
        # One odd layout names a bathtub's basin "SinkBasin"; its text name would lie about its type.
        if rtype.endswith("Basin") and head + "Basin" != rtype:
            continue
        if rtype not in STATIC_RECEPTACLE_TYPES:
            continue
        receptacles.append(Receptacle(rid, rtype, grid_location(*openable[rid])))
    object_types = frozenset(json.loads(objects_path.read_text()))
    return Scene(number, room_of(number), tuple(receptacles), object_types)


def available_scenes(split: str) -> list[int]:
    """ALFRED's own scene split: train scenes for `train`/`valid_seen`, held-out scenes for `valid_unseen`."""
    if split in ("train", "valid_seen"):
        numbers = constants.TRAIN_SCENE_NUMBERS
    elif split == "valid_unseen":
        numbers = constants.TEST_SCENE_NUMBERS
    else:
        raise ValueError(f"split={split!r} must be one of train, valid_seen, valid_unseen")
    return [n for n in sorted(numbers) if (LAYOUT_DIR / f"FloorPlan{n}-openable.json").is_file()]
