"""Text normalisation for WebShop's official reward: the colour normaliser and thefuzz's token-set ratio.

The reference reward (WebShop's `web_agent_site/engine/goal.py` and `normalize.py`, as vendored by the
GiGPO paper's code) compares option values after mapping each to its colour word, and compares both
attributes and options with thefuzz's `token_set_ratio`. thefuzz pre-processes both strings (lower
case, every non-alphanumeric character turned into a space, trimmed) and rounds the score to an
integer, so "sulfate-free" and "sulfate free" score 100; RapidFuzz's bare `token_set_ratio` does
neither and scores them 58. Both rules live here, and nowhere else, so the reward and the expert
agree on what "matches" means.
"""
from __future__ import annotations

from thefuzz import fuzz

#: A match needs a token-set ratio above this (strictly), in the reference as here.
FUZZY_THRESHOLD = 85

#: The reference's colour words, in its order: the normaliser returns the FIRST of these that occurs
#: anywhere in the value (a substring test, so "123alabaster" -> "alabaster" and "violet lavender" ->
#: "lavender", which comes first in this list).
COLOR_WORDS: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite",
    "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)


def normalize_color(value: str) -> str:
    """The first colour word (in `COLOR_WORDS` order) found in `value`, else `value` unchanged.

    Case-sensitive, as in the reference: option values are lower case there and here.
    """
    return next((color for color in COLOR_WORDS if color in value), value)


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's token-set ratio: 0-100, integer, after lower-casing and stripping punctuation."""
    return int(fuzz.token_set_ratio(a, b))


def fuzzy_match(a: str, b: str) -> bool:
    return token_set_ratio(a, b) > FUZZY_THRESHOLD


def option_matches(goal_value: str, chosen_values: list[str]) -> bool:
    """The reference's option rule: some CHOSEN value, colour-normalised, fuzzy-matches the normalised goal
    value. Nothing else counts (no product text, no exact rule for sizes)."""
    goal = normalize_color(goal_value)
    return any(fuzzy_match(normalize_color(chosen), goal) for chosen in chosen_values)
