"""The registry: the trainer picks estimators by name, and a user adds one in a few lines."""
from __future__ import annotations

import numpy as np
import pytest

from gigpo.advantage import (
    ESTIMATORS, AdvantageOptions, StepRows, compute_advantages, get_estimator, register_estimator, scored,
)

OPTIONS = dict(gamma=1.0, lam=1.0, step_weight=1.0, norm="mean", episode_stats="trajectory", similarity=None)


def test_builtin_estimators_are_registered():
    assert {"gigpo", "grpo", "rloo", "ppo"} <= set(ESTIMATORS)
    assert get_estimator("gigpo") is ESTIMATORS["gigpo"]


def test_a_user_estimator_is_callable_by_name_and_names_stay_unique():
    @register_estimator("raw_return_test")
    def raw_return(rows: StepRows, options: AdvantageOptions) -> StepRows:
        returns = rows.layout.reverse_discounted_sum(rows.reward, options.gamma)
        n = len(rows)
        return scored(rows, returns, np.zeros(n), np.zeros(n), np.ones(n, dtype=np.int64), returns)

    try:
        rows = StepRows(group=[0, 0], traj=[0, 0], step=[1, 0], reward=[2.0, 1.0], anchor=[0, 0])
        out = compute_advantages("raw_return_test", rows, **OPTIONS)
        np.testing.assert_array_equal(out.advantage, [2.0, 3.0])
        with pytest.raises(ValueError, match="'raw_return_test' is already registered"):
            register_estimator("raw_return_test")(raw_return)
    finally:
        del ESTIMATORS["raw_return_test"]
