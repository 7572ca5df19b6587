"""The shop's pages as text, and what can be clicked on each.

Every page starts with the instruction line; buttons are shown in brackets and clicked by their
lower-cased text (`[Next >]` -> `click[next >]`, a result's id -> `click[b0k3x...]`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from gigpo.envs.webshop.catalogue import Product

PRODUCT_WINDOW = 10
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "back to search", "next >", "< prev", "buy now"
SUB_PAGES = ("description", "features", "reviews", "attributes")
INSTRUCTION_PREFIX = "Instruction: "
SEARCH_HINT = "search[<your query>]"

Kind = Literal["search", "results", "item", "sub", "done"]


@dataclass
class PageState:
    kind: Kind = "search"
    keywords: str = ""
    results: list[str] = field(default_factory=list)
    """Product ids of the last search (at most 50), best first."""
    page: int = 1
    asin: Optional[str] = None
    options: dict[str, str] = field(default_factory=dict)
    """Option name -> chosen value on the current item."""
    sub: str = ""

    def page_results(self) -> list[str]:
        return self.results[(self.page - 1) * PRODUCT_WINDOW:self.page * PRODUCT_WINDOW]

    def has_next(self) -> bool:
        return self.page * PRODUCT_WINDOW < len(self.results)


def clickables(state: PageState, product: Optional[Product]) -> list[str]:
    """Lower-cased texts of what can be clicked on the page, in page order."""
    if state.kind == "results":
        return ([BACK_TO_SEARCH] + ([PREV_PAGE] if state.page > 1 else []) + ([NEXT_PAGE] if state.has_next() else [])
                + state.page_results())
    if state.kind == "item" and product is not None:
        values = [v for _, values in product.options for v in values]
        return [BACK_TO_SEARCH, PREV_PAGE] + values + list(SUB_PAGES) + [BUY_NOW]
    if state.kind == "sub":
        return [BACK_TO_SEARCH, PREV_PAGE]
    return []


def render_body(state: PageState, products: dict[str, Product], purchase_note: str = "") -> str:
    """The page without its instruction line (GiGPO's anchor)."""
    if state.kind == "search":
        return f"[Search]\nType {SEARCH_HINT} to search the shop."
    if state.kind == "results":
        shown = state.page_results()
        lines = ["[Back to Search]", f"Page {state.page} (Total results: {len(state.results)})"]
        lines += (["[< Prev]"] if state.page > 1 else []) + (["[Next >]"] if state.has_next() else [])
        if not shown:
            lines.append("No products match your search.")
        for asin in shown:
            product = products[asin]
            lines += [f"[{asin}]", product.title, product.shown_price()]
        return "\n".join(lines)
    if state.kind == "done":
        return purchase_note
    product = products[state.asin] if state.asin else None
    assert product is not None
    lines = ["[Back to Search]", "[< Prev]"]
    if state.kind == "item":
        for name, values in product.options:
            chosen = state.options.get(name)
            lines.append(f"{name}: " + " ".join(f"[{v}]" + (" (selected)" if v == chosen else "") for v in values))
        lines += [product.title, f"Price: {product.shown_price()}", f"Rating: {product.rating()}",
                  "[Description] [Features] [Reviews] [Attributes] [Buy Now]"]
    elif state.sub == "description":
        lines.append(product.description or "(no description)")
    elif state.sub == "features":
        lines += [f"- {b}" for b in product.bullets] or ["(no features)"]
    elif state.sub == "reviews":
        lines += [f"{r.score}/5 {r.title}: {r.body}" for r in product.reviews] or ["No reviews yet."]
    else:
        lines.append(", ".join(product.attributes) or "(no attributes)")
    return "\n".join(lines)


def render_page(instruction: str, body: str) -> str:
    return f"{INSTRUCTION_PREFIX}{instruction}\n{body}"
