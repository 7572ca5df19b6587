"""The official WebShop data, when a user has it: products, mined attributes, instructions, reviews.

Files, in the format of the WebShop repository's `data/` folder (found by name in one directory):

    items_shuffle*.json   list of products: asin, name, full_description, small_description (str or
                          list), pricing ("$12.99" or "$10.00 - $20.00"), customization_options
                          ({name: [{"value": ..., "image": ...}]}), query, category, product_category
                          ("Beauty & Personal Care › Hair Care › Shampoo")
    items_ins_v2*.json    {asin: {"attributes": [...], "instruction": ..., "instruction_attributes": [...]}}
    items_human_ins.json  {asin: [{"instruction": ..., "instruction_attributes": [...],
                                    "instruction_options": [...]}]}   (human goals, the default)
    reviews.json          optional: [{"asin": ..., "reviews": [{"title", "score", "body"}], "average_rating"}]

Where a directory holds several `items_shuffle*` (or `items_ins_v2*`) files, the smallest is used
(the reference code's default is its 1,000-product set); pass the file names to choose.

Differences from the reference loader, all for determinism: a price range's price is its midpoint
(the reference draws one at random per load; the pages show the range as the reference does,
"$10.0 to $25.5"), price bounds come from a generator seeded with
`seed` and the goal's index, and goals are shuffled by a seeded NumPy permutation (the reference
uses Python's `random.seed(233)`, whose sequence the workers' own draws then disturb).
"""
from __future__ import annotations

import itertools
import json
import math
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import numpy as np

from gigpo.envs.webshop.catalogue import Catalogue, Goal, Product, Review
from gigpo.envs.webshop.generate import PRICE_STEPS

DEFAULT_PRICE = 100.0
_PRICE_RE = re.compile(r"\$\s*([\d,]*\.?\d+)")


def _find(directory: Path, pattern: str, chosen: Optional[str], required: bool) -> Optional[Path]:
    if chosen:
        path = Path(chosen) if Path(chosen).is_absolute() else directory / chosen
        if not path.is_file():
            raise FileNotFoundError(f"WebShop data file {path} does not exist")
        return path
    found = sorted(directory.glob(pattern), key=lambda p: (p.stat().st_size, p.name))
    if not found and required:
        raise FileNotFoundError(f"no {pattern} in {directory}: point data_path at the folder holding WebShop's "
                                f"data files (items_shuffle*.json, items_ins_v2*.json, items_human_ins.json)")
    return found[0] if found else None


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None


def _prices(pricing: Any) -> list[float]:
    """The one or two dollar amounts of a pricing string; [$100] when there are none, as in the reference."""
    values = [float(v.replace(",", "")) for v in _PRICE_RE.findall(pricing or "")] if isinstance(pricing, str) else []
    return values[:2] or [DEFAULT_PRICE]


def parse_pricing(pricing: Any) -> float:
    """"$12.99" -> 12.99; "$10.00 - $20.00" -> 15.0 (the midpoint); missing -> $100 as in the reference."""
    values = _prices(pricing)
    return values[0] if len(values) == 1 else round((values[0] + values[1]) / 2, 2)


def price_tag(pricing: Any) -> str:
    """The price as the reference's pages show it: "$12.99", "$10.0 to $25.5" (Python's float repr), "$100.0"."""
    return " to ".join(f"${v!r}" for v in _prices(pricing))


def _ascii(text: Any) -> str:
    """Pages are printable ASCII (gigpo's text space): "Café™" -> "Cafe"."""
    text = unicodedata.normalize("NFKD", str(text or "")).encode("ascii", "ignore").decode()
    return "".join(c if c.isprintable() or c == "\n" else " " for c in text)


def _option_value(text: str) -> str:
    return _ascii(text).strip().replace("/", " | ").lower()


def _product(raw: dict[str, Any], attributes: dict[str, Any], reviews: dict[str, list[Review]]) -> Product:
    asin = raw["asin"]
    bullets = raw.get("small_description") or []
    options = []
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents:
            options.append((name.lower(), tuple(_option_value(c["value"]) for c in contents)))
    query = (raw.get("query") or "").lower().strip()
    category = tuple(x.strip().lower() for x in (raw.get("product_category") or "").split("›") if x.strip())
    return Product(
        asin=asin.lower(), title=_ascii(raw.get("name")), product_type=query, department=(raw.get("category") or ""),
        price=parse_pricing(raw.get("pricing")), price_tag=price_tag(raw.get("pricing")),
        attributes=tuple(_ascii(a) for a in attributes.get(asin, {}).get("attributes") or ()), options=tuple(options),
        bullets=tuple(_ascii(b) for b in (bullets if isinstance(bullets, list) else [bullets])),
        description=_ascii(raw.get("full_description")), reviews=tuple(reviews.get(asin, ())), query=query,
        category=category)


def _price_bound(price: float, rng: np.random.Generator) -> float:
    steps = [p for p in PRICE_STEPS if p > price][:4]
    return float(max(rng.choice(steps, size=2, replace=False))) if len(steps) >= 2 else math.inf


def _goal(product: Product, text: str, attributes: list[str], options: list[tuple[str, str]],
          index: int, seed: int) -> Goal:
    bound = _price_bound(product.price, np.random.default_rng([seed, index]))
    price_text = f", and price lower than {bound:.2f} dollars" if math.isfinite(bound) else ""
    text = _ascii(text).strip().strip(".")
    return Goal(product.asin, text + price_text, product.product_type, product.department, tuple(attributes),
                tuple(options), bound, keywords=text, title=product.title, query=product.query,
                category=product.category)


def load_official(data_path: str, num_products: Optional[int] = None, human_goals: bool = True, seed: int = 0,
                  products_file: Optional[str] = None, attributes_file: Optional[str] = None) -> Catalogue:
    directory = Path(data_path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"WebShop data_path={data_path!r} is not a directory")
    raw_products = _read(_find(directory, "items_shuffle*.json", products_file, True))
    attributes = _read(_find(directory, "items_ins_v2*.json", attributes_file, True))
    reviews: dict[str, list[Review]] = {}
    review_path = _find(directory, "reviews.json", None, False)
    for entry in _read(review_path) if review_path else []:
        reviews[entry["asin"]] = [Review(int(float(r.get("score", r.get("stars", 0)) or 0)), _ascii(r.get("title")),
                                         _ascii(r.get("body", r.get("review")))) for r in entry.get("reviews", [])]
    if num_products is not None:
        raw_products = raw_products[:num_products]

    products: list[Product] = []
    by_raw_asin: dict[str, Product] = {}
    for raw in raw_products:
        asin = raw.get("asin", "nan")
        if asin == "nan" or len(asin) > 10 or asin in by_raw_asin:
            continue
        by_raw_asin[asin] = _product(raw, attributes, reviews)
        products.append(by_raw_asin[asin])

    goals: list[Goal] = []
    if human_goals:
        human_path = _find(directory, "items_human_ins.json", None, True)
        human = _read(human_path)
        for asin, product in by_raw_asin.items():
            for entry in human.get(asin, []):
                if entry.get("instruction_attributes"):
                    # the goal's option values as written: the reward compares them fuzzily (normalize.py)
                    options = [("", _ascii(v).strip()) for v in entry.get("instruction_options") or []]
                    goals.append(_goal(product, entry["instruction"], entry["instruction_attributes"], options,
                                       len(goals), seed))
    else:
        for asin, product in by_raw_asin.items():
            entry = attributes.get(asin, {})
            if not entry.get("instruction"):
                continue
            by_name = dict(product.options)
            names = sorted(by_name)  # the reference lists a synthetic goal's options sorted by name
            for combination in itertools.product(*(by_name[name] for name in names)):
                options = list(zip(names, combination))
                suffix = " with " + ", and ".join(f"{n}: {v}" for n, v in options) if options else ""
                goals.append(_goal(product, entry["instruction"].strip(".") + suffix,
                                   entry["instruction_attributes"], options, len(goals), seed))
    order = np.random.default_rng([seed, 233]).permutation(len(goals))
    return Catalogue(products, [goals[i] for i in order], source="official")


@lru_cache(maxsize=2)
def cached_official(data_path: str, num_products: Optional[int], human_goals: bool, seed: int) -> Catalogue:
    return load_official(data_path, num_products, human_goals, seed)
