"""Products, goals and their fixed train/eval/test split: what the WebShop env shops in.

A catalogue comes from the generator (`generate.generate_catalogue`) or from the official WebShop
files (`official.load_official`). Its goal list is fixed when the catalogue is built and split by
index (test first, then eval, then train), so every worker, and every run, sees the same split: a
goal's split never depends on a reset seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Optional

if TYPE_CHECKING:
    from gigpo.envs.webshop.search import SearchIndex

SPLITS: tuple[str, ...] = ("train", "eval", "test")
#: Test and eval each take this share of the goals (at least one each, at most `MAX_HELD_OUT`).
HELD_OUT_SHARE = 0.1
#: WebShop's reference setup evaluates on 500 goals; larger catalogues hold out no more than that.
MAX_HELD_OUT = 500


@dataclass(frozen=True, slots=True)
class Review:
    score: int
    title: str
    body: str


@dataclass(frozen=True, slots=True)
class Product:
    asin: str
    """The clickable id on result pages (lower case)."""
    title: str
    product_type: str
    department: str
    price: float
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    """(option name, values) in page order; names and values lower case."""
    bullets: tuple[str, ...]
    description: str
    reviews: tuple[Review, ...] = ()
    query: str = ""
    """Official data: the search query the product was scraped with (part of its type match)."""
    category: tuple[str, ...] = ()
    """Official data: the category path ("beauty & personal care", "hair care", ...)."""

    def option_values(self) -> dict[str, str]:
        """value -> option name, for every value the item page offers."""
        return {value: name for name, values in self.options for value in values}

    def search_text(self) -> str:
        """What the search engine indexes: title, bullets, description and option values."""
        values = " ".join(v for _, values in self.options for v in values)
        return " ".join((self.title, " ".join(self.bullets), self.description, values))

    def rating(self) -> str:
        if not self.reviews:
            return "N.A."
        return f"{sum(r.score for r in self.reviews) / len(self.reviews):.1f}"


@dataclass(frozen=True, slots=True)
class Goal:
    asin: str
    """The product the instruction was written from (one that earns reward 1 when it is findable)."""
    instruction: str
    product_type: str
    department: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    """(option name, value); the name is "" when the data does not say (official human goals)."""
    price_upper: float
    """Price bound in dollars; `math.inf` when the instruction states none."""
    keywords: str
    """The words the expert searches with: all taken from the instruction."""
    title: str = ""
    query: str = ""
    category: tuple[str, ...] = ()


@dataclass
class Catalogue:
    products: list[Product]
    goals: list[Goal]
    source: Literal["generated", "official"]
    by_asin: dict[str, Product] = field(init=False)
    _index: Optional["SearchIndex"] = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}
        if len(self.by_asin) != len(self.products):
            raise ValueError("product ids (asin) must be unique within a catalogue")
        missing = [g.asin for g in self.goals if g.asin not in self.by_asin]
        if missing:
            raise ValueError(f"{len(missing)} goals name products that are not in the catalogue, e.g. {missing[0]!r}")
        if len(self.goals) < len(SPLITS):
            raise ValueError(f"a catalogue needs at least {len(SPLITS)} goals (one per split), got {len(self.goals)}; "
                             f"use more products")

    @property
    def index(self) -> "SearchIndex":
        """The BM25 index over the products, built on first use and kept (bm25s is imported only then)."""
        if self._index is None:
            from gigpo.envs.webshop.search import SearchIndex

            self._index = SearchIndex([(p.asin, p.search_text()) for p in self.products])
        return self._index

    def split_range(self, split: str) -> range:
        """Goal indices of a split: test first, then eval, then train (the rest)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown; use one of {', '.join(SPLITS)}")
        total = len(self.goals)
        held = min(MAX_HELD_OUT, max(1, int(total * HELD_OUT_SHARE)))
        return {"test": range(0, held), "eval": range(held, 2 * held), "train": range(2 * held, total)}[split]
