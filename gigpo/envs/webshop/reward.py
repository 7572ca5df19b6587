"""WebShop's reward at `Buy Now`: the share of the goal's attributes, options and price bound matched,
times a product-type match.

    reward = (attributes matched + options matched + [price <= bound]) / (attributes + options + 1) x type

Generated catalogues match exactly: an attribute is in the product's attribute list, an option is the
value chosen on the item page, and the type is 1 for the goal's product type, 0.5 for another type
of the same department, 0 otherwise. Official data follows the reference code (the WebShop copy the
GiGPO paper's code vendors, `web_agent_site/engine/goal.py`):

- an attribute matches when one of the product's attributes scores a thefuzz token-set ratio above 85
  against it, or the phrase appears in the title, the bullets or the description;
- an option matches only through the CHOSEN options: some chosen value, colour-normalised, scores above
  85 against the colour-normalised goal value (`normalize.option_matches`); product text gives no credit;
- the type match is graded from the search query, the category path and the share of the goal title's
  words in the bought title (the reference uses spaCy nouns; here every non-stopword counts, see
  docs/envs.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gigpo.envs.webshop.catalogue import Goal, Product
from gigpo.envs.webshop.normalize import fuzzy_match, normalize_color, option_matches, token_set_ratio

_WORD_RE = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Score:
    reward: float
    type_match: float
    attributes: dict[str, bool]
    options: dict[str, bool]
    """"name: value" (or the bare value when the goal names no option) -> matched."""
    price: bool

    def as_info(self) -> dict[str, Any]:
        return {"reward": self.reward, "type_match": self.type_match, "attributes": dict(self.attributes),
                "options": dict(self.options), "price": self.price}


def best_options(product: Product, goal: Goal, fuzzy: bool = False) -> dict[str, str]:
    """The options an expert picks (name -> value): for each goal option, the offered value that matches it.

    Exact on the generated shop. On official data each goal option not yet matched by the values picked
    so far takes the offered value with the highest token-set ratio after colour normalisation, if that
    passes the reference's threshold (one value per option name; a goal option that names its option
    looks only there when the product has it).
    """
    if not fuzzy:
        offered = product.option_values()
        return {offered[value]: value for name, value in goal.options
                if value in offered and (not name or offered[value] == name)}
    chosen: dict[str, str] = {}
    names = {name for name, _ in product.options}
    for goal_name, value in goal.options:
        if option_matches(value, list(chosen.values())):
            continue
        target = normalize_color(value)
        candidates = [(token_set_ratio(normalize_color(v), target), name, v) for name, values in product.options
                      if name not in chosen and (goal_name not in names or name == goal_name) for v in values]
        if candidates:
            _, name, v = max(candidates, key=lambda c: c[0])  # the first of equals: page order
            if fuzzy_match(normalize_color(v), target):
                chosen[name] = v
    return chosen


def score_purchase(product: Product, chosen: dict[str, str], goal: Goal, fuzzy: bool) -> Score:
    """Score buying `product` with `chosen` options (name -> value) against `goal`."""
    match = _official_attribute_matches if fuzzy else (lambda attribute, p: attribute in p.attributes)
    attributes = {a: match(a, product) for a in goal.attributes}
    options = {}
    for name, value in goal.options:
        if fuzzy:
            picked = option_matches(value, list(chosen.values()))
        else:
            picked = chosen.get(name) == value if name else value in chosen.values()
        options[f"{name}: {value}" if name else value] = picked
    price = product.price <= goal.price_upper
    type_match = _official_type_match(product, goal) if fuzzy else _generated_type_match(product, goal)
    matched = sum(attributes.values()) + sum(options.values()) + int(price)
    reward = matched / (len(attributes) + len(options) + 1) * type_match
    return Score(reward, type_match, attributes, options, price)


def _official_attribute_matches(attribute: str, product: Product) -> bool:
    """A fuzzy match with one of the product's attributes, else the phrase in its title, bullets or description
    (each searched on its own, lower-cased; the goal's phrase as written, as in the reference)."""
    if any(fuzzy_match(p, attribute) for p in product.attributes):
        return True
    return any(attribute in text.lower() for text in (product.title, " ".join(product.bullets), product.description))


def _generated_type_match(product: Product, goal: Goal) -> float:
    if product.product_type == goal.product_type:
        return 1.0
    return 0.5 if product.department == goal.department else 0.0


def _content_words(text: str) -> set[str]:
    from bm25s.tokenization import STOPWORDS_EN

    return {w for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS_EN and not w.isdigit()}


def _official_type_match(product: Product, goal: Goal) -> float:
    """The reference code's graded type match (1, 0.5, 0.1, 0) with title words standing in for nouns."""
    query_match = bool(goal.query) and product.query == goal.query
    category_match = len(set(product.category) & set(goal.category)) >= 2
    wanted = _content_words(goal.title)
    title_score = len(_content_words(product.title) & wanted) / len(wanted) if wanted else 0.2
    if title_score == 0.0:
        return 0.0
    if title_score < 0.1:
        return 0.1
    return 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
