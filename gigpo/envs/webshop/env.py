"""WebShop as a gigpo agent environment: search a shop, inspect items, pick options, buy.

Description
    The agent reads an instruction ("i need sulfate free velora shampoo in size 16 fl oz, and price
    lower than 30.00 dollars"), searches, pages through results, opens items and their Description,
    Features, Reviews and Attributes pages, chooses options and clicks Buy Now. The protocol is the
    WebShop text environment's (princeton-nlp/WebShop); the shop is a generated catalogue
    (`gigpo.envs.webshop.generate`) unless `data_path` (or $WEBSHOP_DATA) names the official files.
Pages
    search -> results (BM25 top 50, 10 per page, `Next >`, `< Prev`, `Back to Search`) -> item
    (options, the four sub-pages, `Buy Now`) -> done. The instruction is the first line of every page.
Action space
    Free text; the parser takes `<action>...</action>` holding `search[keywords]` (only on the search
    page) or `click[button]` with a button of the page (case does not matter). Anything else is
    invalid: the page stays as it is and the step reward is `-invalid_action_penalty`.
    `admissible_actions()` lists the page's clicks, or `search[<your query>]` on the search page.
Reward
    At Buy Now: the share of the goal's attributes, options and price bound the bought item matches,
    times a product-type match (see `reward.py`); 0 on other steps. Success (`won`) is a reward of
    exactly 1; WebShop's score is 100 x the mean reward.
Episode end
    terminated at Buy Now; truncated by Gymnasium's TimeLimit after `env.max_steps` steps (`max_episode_steps`,
    default 15), invalid ones included; a step after either raises EpisodeOverError.
Goals
    A fixed goal list split by index (`split_scheme`: "share" by default on the generated shop, the
    GiGPO paper's "paper" split on official data; `Catalogue.split_range`). The reset seed picks
    goal `split[seed % len(split)]`; `options={"goal_index": i}` picks goal i of the whole list.
Anchor
    The page without the instruction line, as in the GiGPO reference code.
Info
    `goal_index`, `split`; at Buy Now `purchase`: the product, chosen options, reward, type match and
    which attributes, options and price matched.
Version history
    v0: first version.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Optional

from gigpo.envs.base import INVALID_ACTION_PENALTY, AgentEnv, parse_tagged_action, rng_seed
from gigpo.envs.webshop.catalogue import Catalogue, Goal, Product
from gigpo.envs.webshop.generate import cached_catalogue
from gigpo.envs.webshop.pages import (
    BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, SEARCH_HINT, SUB_PAGES, PageState, clickables, render_body,
    render_page,
)
from gigpo.envs.webshop.reward import best_options, score_purchase

DATA_ENV_VAR = "WEBSHOP_DATA"
_ACTION_RE = re.compile(r"^(search|click)\s*\[(.*)\]$", re.DOTALL | re.IGNORECASE)


def load_catalogue(data_path: Optional[str], num_products: Optional[int], seed: int, human_goals: bool) -> Catalogue:
    """The official data when `data_path` (or $WEBSHOP_DATA) is set, else a generated catalogue."""
    data_path = data_path or os.environ.get(DATA_ENV_VAR) or None
    if data_path:
        from gigpo.envs.webshop.official import cached_official

        return cached_official(str(data_path), num_products, human_goals, seed)
    return cached_catalogue(1000 if num_products is None else num_products, seed)


class WebShopEnv(AgentEnv):
    """WebShop's search-and-buy protocol over a generated (or the official) catalogue."""

    #: No {task} line: every page already starts with the instruction.
    prompt_template = (
        "You are shopping in the WebShop online store for a customer.\n"
        "{history}"
        "Step {step} of {max_steps}. Current page:\n{observation}\n"
        "{admissible_actions}"
        "{action_format}"
    )
    action_format = (
        "First reason inside <think> </think>, then give exactly one action inside <action> </action>: "
        "search[keywords] on the search page, otherwise click[...] with one of the admissible buttons."
    )

    def __init__(
        self,
        num_products: Optional[int] = None,
        catalogue_seed: int = 0,
        split: str = "train",
        data_path: Optional[str] = None,
        human_goals: bool = True,
        split_scheme: Optional[str] = None,
        invalid_action_penalty: float = INVALID_ACTION_PENALTY,
        render_mode: Optional[str] = None,
    ) -> None:
        super().__init__(invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        self.catalogue = load_catalogue(data_path, num_products, catalogue_seed, human_goals)
        official = self.catalogue.source == "official"
        self.split_scheme = split_scheme or ("paper" if official else "share")
        self.goal_indices = self.catalogue.split_range(split, self.split_scheme)
        if not self.goal_indices:
            raise ValueError(f"split={split!r} has no goals under split_scheme={self.split_scheme!r}: the catalogue "
                             f"has {len(self.catalogue.goals)}; pass split_scheme='share' (10% test, 10% eval, the "
                             f"rest train) for a catalogue this small")
        self.split = split
        self._fuzzy = official
        self._seed: Optional[int] = None
        self._goal_index = -1
        self.goal: Optional[Goal] = None
        self.state = PageState()
        self._body = ""
        self._searched: set[str] = set()
        self._matches: dict[str, bool] = {}

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[str, dict[str, Any]]:
        self._seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.goal is None:
            raise RuntimeError("call reset() before step()")
        return super().step(action)

    # ------------------------------------------------------------------ AgentEnv hooks
    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        episode_seed = self._seed if self._seed is not None else rng_seed(self.np_random)
        index = (options or {}).get("goal_index")
        if index is None:
            index = self.goal_indices[episode_seed % len(self.goal_indices)]
        if not 0 <= index < len(self.catalogue.goals):
            raise ValueError(f"goal_index={index} must be in [0, {len(self.catalogue.goals)})")
        self._goal_index, self.goal = index, self.catalogue.goals[index]
        self.task, self.task_type = self.goal.instruction, self.goal.department
        self.state, self._searched, self._matches = PageState(), set(), {}
        return self._render(), self._extra()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        kind, arg = _split_action(action)
        state, extra = self.state, self._extra()
        reward = 0.0
        if kind == "search":
            self._searched.add(arg)
            self.state = PageState("results", keywords=arg, results=self.catalogue.index.search(arg))
        elif arg == BACK_TO_SEARCH:
            self.state = PageState()
        elif state.kind == "results":
            page = state.page + (1 if arg == NEXT_PAGE else -1 if arg == PREV_PAGE else 0)
            if page != state.page:
                self.state = dataclasses.replace(state, page=page)
            else:
                self.state = dataclasses.replace(state, kind="item", asin=arg, options={})
        elif state.kind == "sub":  # only < Prev is left: back to the item
            self.state = dataclasses.replace(state, kind="item", sub="")
        elif arg == PREV_PAGE:
            self.state = dataclasses.replace(state, kind="results", asin=None, options={})
        elif arg in SUB_PAGES:
            self.state = dataclasses.replace(state, kind="sub", sub=arg)
        elif arg == BUY_NOW:
            reward, extra["purchase"] = self._buy()
        else:  # an option value of this item
            name = self.catalogue.by_asin[state.asin].option_values()[arg]
            self.state = dataclasses.replace(state, options={**state.options, name: arg})
        return self._render(extra.get("purchase")), reward, self.state.kind == "done", extra

    def parse_action(self, text: str) -> tuple[Optional[str], str]:
        """`<action>search[...]</action>` or `<action>click[...]</action>`, normalised to lower case."""
        action, reason = parse_tagged_action(text)
        if action is None:
            return None, reason
        match = _ACTION_RE.match(action)
        if match is None:
            return None, f"{action!r} is neither search[keywords] nor click[button]"
        kind, arg = match.group(1).lower(), " ".join(match.group(2).split()).lower()
        if not arg:
            return None, f"{kind}[] needs {'keywords' if kind == 'search' else 'a button'}"
        return f"{kind}[{arg}]", ""

    def is_admissible(self, action: str) -> bool:
        if action.startswith("search["):
            return self.state.kind == "search"
        return action in self.admissible_actions()

    def admissible_actions(self) -> list[str]:
        if self.state.kind == "search":
            return [SEARCH_HINT]
        return [f"click[{c}]" for c in clickables(self.state, self._product())]

    def anchor(self) -> str:
        return self._body

    def expert_action(self) -> Optional[str]:
        """Search with the goal's words, open the first matching result, choose its options, buy.

        A result "matches" when buying it with the goal's options earns reward 1 (or it is the goal's
        own product, for official data whose goals may not reach 1). When the goal's words find none,
        the expert searches again with the product's title.
        """
        goal, state = self.goal, self.state
        if goal is None or state.kind == "done":
            return None
        if state.kind == "search":
            keywords = " ".join(goal.keywords.lower().split())
            return f"search[{keywords if keywords not in self._searched else goal.title.lower()}]"
        if state.kind == "sub":
            return f"click[{PREV_PAGE}]"
        if state.kind == "item":
            if not self._match(state.asin):
                return f"click[{PREV_PAGE}]"
            product = self.catalogue.by_asin[state.asin]
            for name, value in best_options(product, goal, self._fuzzy).items():
                if state.options.get(name) != value:
                    return f"click[{value}]"
            return f"click[{BUY_NOW}]"
        found = next((i for i, asin in enumerate(state.results) if self._match(asin)), None)
        if found is None:
            return f"click[{BACK_TO_SEARCH}]"
        target_page = found // 10 + 1
        if target_page > state.page:
            return f"click[{NEXT_PAGE}]"
        if target_page < state.page:
            return f"click[{PREV_PAGE}]"
        return f"click[{state.results[found]}]"

    # ------------------------------------------------------------------ internals
    def _product(self) -> Optional[Product]:
        return self.catalogue.by_asin[self.state.asin] if self.state.asin else None

    def _match(self, asin: str) -> bool:
        if asin not in self._matches:
            assert self.goal is not None
            product = self.catalogue.by_asin[asin]
            score = score_purchase(product, best_options(product, self.goal, self._fuzzy), self.goal, self._fuzzy)
            self._matches[asin] = score.reward == 1.0 or asin == self.goal.asin
        return self._matches[asin]

    def _buy(self) -> tuple[float, dict[str, Any]]:
        assert self.goal is not None
        product = self.catalogue.by_asin[self.state.asin]
        score = score_purchase(product, self.state.options, self.goal, self._fuzzy)
        self._won = score.reward == 1.0
        self.state = dataclasses.replace(self.state, kind="done")
        return score.reward, {"asin": product.asin, "chosen_options": dict(self.state.options), **score.as_info()}

    def _render(self, purchase: Optional[dict[str, Any]] = None) -> str:
        note = ""
        if purchase is not None:
            chosen = ", ".join(f"{k}: {v}" for k, v in purchase["chosen_options"].items()) or "none"
            note = (f"Thank you for shopping with us!\nYou bought: {self.catalogue.by_asin[purchase['asin']].title}\n"
                    f"Options: {chosen}\nYour score (min 0.0, max 1.0): {purchase['reward']:.2f}")
        self._body = render_body(self.state, self.catalogue.by_asin, note)
        assert self.goal is not None
        return render_page(self.goal.instruction, self._body)

    def _extra(self) -> dict[str, Any]:
        return {"goal_index": self._goal_index, "split": self.split}


def _split_action(action: str) -> tuple[str, str]:
    kind, _, rest = action.partition("[")
    return kind, rest[:-1]
