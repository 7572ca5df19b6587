"""WebShop's official reward rules (the reference's goal.py and normalize.py), one rule per test."""
from __future__ import annotations

import math

import pytest

from gigpo.envs.webshop.catalogue import Goal, Product
from gigpo.envs.webshop.normalize import normalize_color, option_matches, token_set_ratio
from gigpo.envs.webshop.reward import best_options, score_purchase


def _product(**fields) -> Product:
    base = dict(asin="b0x", title="Plain Tee", product_type="t shirt", department="fashion", price=10.0,
                attributes=(), options=(), bullets=(), description="", query="t shirt")
    return Product(**{**base, **fields})


def _goal(**fields) -> Goal:
    base = dict(asin="b0x", instruction="", product_type="t shirt", department="fashion", attributes=(),
                options=(), price_upper=math.inf, keywords="", title="Plain Tee", query="t shirt")
    return Goal(**{**base, **fields})


@pytest.mark.parametrize("value, expected", [
    ("", ""), ("black forest", "black"), ("violet lavender", "lavender"),  # the list's order, not the text's
    ("steelivy fuchsia", "fuchsia"), ("123alabaster", "alabaster"), ("webshop", "webshop"), ("Black", "Black"),
])
def test_the_colour_normaliser_returns_the_first_listed_colour_word_found(value, expected):
    assert normalize_color(value) == expected


def test_token_set_ratio_uses_thefuzz_preprocessing_and_integer_scores():
    assert token_set_ratio("sulfate-free", "sulfate free") == 100  # RapidFuzz's bare scorer gives 58.3
    assert token_set_ratio("Coconut | Lime", "coconut lime") == 100
    assert isinstance(token_set_ratio("8 fl oz", "12 fl oz"), int) and token_set_ratio("8 fl oz", "12 fl oz") == 83


def test_a_goal_option_matches_when_some_chosen_option_scores_above_85():
    assert option_matches("black", ["x-large", "black forest"])  # normalised to "black"
    assert option_matches("coconut lime", ["coconut | lime"])
    assert not option_matches("8 fl oz", ["12 fl oz"])  # 83: not above 85
    assert not option_matches("black", [])


def test_options_earn_credit_only_from_chosen_values_not_from_the_text():
    product = _product(title="Plain Tee Black", description="black cotton", bullets=("x-large fit",),
                       options=(("color", ("black", "white")), ("size", ("large", "x-large"))))
    goal = _goal(options=(("", "black"), ("", "x-large")))
    nothing = score_purchase(product, {}, goal, fuzzy=True)
    assert nothing.options == {"black": False, "x-large": False} and nothing.reward == pytest.approx(1 / 3)
    both = score_purchase(product, {"color": "black", "size": "x-large"}, goal, fuzzy=True)
    assert both.reward == 1.0
    # no exact rule for sizes: "large" against "x-large" is a token-set ratio of 100 ("x large" holds "large")
    assert score_purchase(product, {"size": "large"}, _goal(options=(("", "x-large"),)), fuzzy=True).options == {
        "x-large": True}


def test_attributes_ignore_hyphens_and_punctuation_and_fall_back_to_the_text():
    product = _product(attributes=("sulfate-free", "Paraben Free!"), bullets=("Long lasting scent",))
    goal = _goal(attributes=("sulfate free", "paraben free", "long lasting", "cruelty free"))
    assert score_purchase(product, {}, goal, fuzzy=True).attributes == {
        "sulfate free": True, "paraben free": True, "long lasting": True, "cruelty free": False}


def test_the_expert_picks_one_fuzzy_matching_value_per_option_name():
    product = _product(options=(("color", ("ivory white", "black forest")), ("scent", ("vanilla", "coconut | lime"))))
    goal = _goal(options=(("", "coconut lime"), ("", "black")))
    chosen = best_options(product, goal, fuzzy=True)
    assert chosen == {"scent": "coconut | lime", "color": "black forest"}
    assert score_purchase(product, chosen, goal, fuzzy=True).reward == 1.0
    assert best_options(product, goal) == {}  # the generated shop's exact rule finds neither


def test_generated_catalogues_keep_exact_matching():
    product = _product(attributes=("sulfate free",), options=(("size", ("1 fl oz", "1.7 fl oz")),))
    goal = _goal(attributes=("sulfate-free",), options=(("size", "1 fl oz"),))
    exact = score_purchase(product, {"size": "1.7 fl oz"}, goal, fuzzy=False)
    assert exact.attributes == {"sulfate-free": False} and exact.options == {"size: 1 fl oz": False}
