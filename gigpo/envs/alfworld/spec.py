"""ALFWorld's fixed names and limits, importable without loading TextWorld (the CLI's --help stays fast)."""
from __future__ import annotations

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SPLITS = ("train", "valid_seen", "valid_unseen")
#: Episode length of ALFWorld in the GiGPO paper; also the generator's bar for the expert.
MAX_STEPS = 50
