"""The placebo control permutes an iteration's advantages: same values, another order, reproducible."""
from __future__ import annotations

import numpy as np

from gigpo.infra.seeds import placebo_advantages


def test_the_placebo_keeps_the_values_moves_them_and_depends_only_on_seed_and_iteration():
    advantage = np.linspace(-2.0, 2.0, 301)
    shuffled = placebo_advantages(advantage, seed=3, iteration=7)
    assert sorted(shuffled) == sorted(advantage)
    assert np.mean(shuffled != advantage) > 0.9  # almost every row gets another row's advantage
    assert np.array_equal(shuffled, placebo_advantages(advantage, seed=3, iteration=7))
    assert not np.array_equal(shuffled, placebo_advantages(advantage, seed=3, iteration=8))
    assert not np.array_equal(shuffled, placebo_advantages(advantage, seed=4, iteration=7))


def test_the_placebo_order_is_the_permutation_runs_were_made_with():
    """Indexing by `placebo_order` draws what `rng.permutation(advantage)` drew before: a placebo run's update
    is unchanged by logging the permuted advantages."""
    advantage = np.random.default_rng(5).normal(size=97)
    before = np.random.default_rng([3, 7]).permutation(advantage)
    assert np.array_equal(placebo_advantages(advantage, seed=3, iteration=7), before)
