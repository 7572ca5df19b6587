"""Every estimator equals the plain per-row loop implementation (naive_advantage.py) on random batches."""
from __future__ import annotations

import numpy as np
from batches import ANY_REWARDS, batches
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_advantage import naive_advantages

from gigpo.advantage import compute_advantages
from support.tolerance import normalised_tolerance

OPTIONS = st.fixed_dictionaries({
    "gamma": st.sampled_from([0.0, 0.5, 0.95, 1.0]),
    "lam": st.sampled_from([0.0, 0.9, 1.0]),
    "step_weight": st.sampled_from([0.0, 0.4, 1.0]),
    "norm": st.sampled_from(["std", "mean"]),
    "episode_stats": st.sampled_from(["trajectory", "steps"]),
})


# rewards up to 10 (batches.ANY_REWARDS), returns summing up to 3 * 6 of them; a group holds up to 4 * 4 * 6 rows
TOLERANCE = normalised_tolerance(magnitude=10 * 3 * 6, terms=4 * 4 * 6)


def _compare(estimator: str, batch, options: dict, similarity=None) -> None:
    rows = batch.rows(with_text=similarity is not None)
    got = compute_advantages(estimator, rows, similarity=similarity, **options)
    want = naive_advantages(estimator, batch.group, batch.traj, batch.step, batch.reward,
                            batch.text if similarity is not None else batch.anchor, batch.value,
                            similarity=similarity, **options)
    for name in ("advantage", "episode_advantage", "step_advantage", "returns"):
        np.testing.assert_allclose(getattr(got, name), want[name], rtol=0, atol=TOLERANCE, err_msg=name)
    np.testing.assert_array_equal(got.step_group_size, want["step_group_size"])


@settings(max_examples=150, deadline=None)
@given(batch=batches(), options=OPTIONS, estimator=st.sampled_from(["gigpo", "grpo", "rloo", "ppo"]))
def test_estimators_match_loops(batch, options, estimator):
    _compare(estimator, batch, options)


@settings(max_examples=60, deadline=None)
@given(batch=batches(rewards=ANY_REWARDS), options=OPTIONS, estimator=st.sampled_from(["gigpo", "grpo", "rloo", "ppo"]))
def test_estimators_match_loops_with_arbitrary_float_rewards(batch, options, estimator):
    _compare(estimator, batch, options)


@settings(max_examples=100, deadline=None)
@given(batch=batches(max_groups=3), options=OPTIONS, threshold=st.sampled_from([0.3, 0.6, 0.8, 0.9, 0.95, 1.0]))
def test_similarity_grouping_matches_loops(batch, options, threshold):
    _compare("gigpo", batch, options, similarity=threshold)
