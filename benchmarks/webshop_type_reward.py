"""How much gigpo's stand-in for spaCy's nouns changes WebShop's reward, measured on the generated shop.

    PYTHONPATH=. python benchmarks/webshop_type_reward.py --num-products 1000

The reference's type match (official data) scores the share of the goal title's NOUNS found in the bought
title, with spaCy's `en_core_web_lg`; that model is not on PyPI (only unofficial re-uploads are), so
gigpo counts every non-stopword instead (`reward._official_type_match`). The generated shop knows each
product's true type, so this script scores, for each goal, every product a shopper would plausibly buy
(its family of look-alikes and the top 10 results of the expert's search), bought with the goal's
options, twice: with the generated shop's exact type rule (1 same type, 0.5 same department, 0) and with
the title-word rule. It prints how often the type factor and the reward differ, and by how much.
"""
from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from gigpo.envs.webshop.generate import generate_catalogue
from gigpo.envs.webshop.reward import _official_type_match, best_options, score_purchase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-products", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    catalogue = generate_catalogue(args.num_products, args.seed)
    changes: Counter[tuple[float, float]] = Counter()
    gaps, pairs = [], 0
    for goal in catalogue.goals:
        line = goal.keywords.split()[0]  # the family's made-up product-line name, in no other family
        family = {p.asin for p in catalogue.products if line in p.title.lower().split()}
        for asin in family | set(catalogue.index.search(goal.keywords, k=10)):
            product = catalogue.by_asin[asin]
            score = score_purchase(product, best_options(product, goal), goal, fuzzy=False)
            share = (sum(score.attributes.values()) + sum(score.options.values()) + score.price) / (
                len(score.attributes) + len(score.options) + 1)
            approx = _official_type_match(product, goal)
            pairs += 1
            if approx != score.type_match:
                changes[(score.type_match, approx)] += 1
                gaps.append(abs(share * approx - share * score.type_match))
    changed = sum(changes.values())
    reward_changed = sum(g > 0 for g in gaps)
    print(f"{args.num_products} products, {len(catalogue.goals)} goals, {pairs} (goal, product) pairs "
          f"(family + top-10 search results)")
    print(f"type factor differs: {changed} ({100 * changed / pairs:.1f}%); reward differs: {reward_changed} "
          f"({100 * reward_changed / pairs:.1f}%), mean |change| there {np.mean([g for g in gaps if g > 0]):.3f}")
    for (exact, approx), n in sorted(changes.items()):
        print(f"  true type factor {exact} -> title words {approx}: {n}")


if __name__ == "__main__":
    main()
