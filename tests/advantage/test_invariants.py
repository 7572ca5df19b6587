"""Properties the definitions imply: order does not matter, shifts cancel, no repeats means GRPO."""
from __future__ import annotations

import numpy as np
from batches import batches
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.advantage import StepRows, compute_advantages
from gigpo.advantage.estimators import successor_options
from gigpo.config import AlgorithmConfig
from support.tolerance import normalised_tolerance

ESTIMATORS = st.sampled_from(["gigpo", "grpo", "rloo", "ppo", "hgpo", "graphgpo"])
# rewards up to 10 plus shifts up to 100, returns summing up to 3 * 6 of them; up to 4 * 4 * 6 rows a group
TOLERANCE = normalised_tolerance(magnitude=(10 + 100) * 3 * 6, terms=4 * 4 * 6)


def run(estimator, rows, **kw):
    options = dict(gamma=0.95, lam=0.9, step_weight=1.0, norm="std", episode_stats="trajectory", similarity=None,
                   **successor_options(AlgorithmConfig()))  # HGPO's and GraphGPO's defaults live in the config
    return compute_advantages(estimator, rows, **{**options, **kw})


@settings(max_examples=60, deadline=None)
@given(batch=batches(), estimator=ESTIMATORS, data=st.data(), norm=st.sampled_from(["std", "mean"]),
       stats=st.sampled_from(["trajectory", "steps"]))
def test_shuffled_rows_give_the_same_per_row_result(batch, estimator, data, norm, stats):
    perm = data.draw(st.permutations(range(len(batch.reward))))
    base = run(estimator, batch.rows(), norm=norm, episode_stats=stats)
    shuffled = run(estimator, batch.permuted(list(perm)).rows(), norm=norm, episode_stats=stats)
    for name in ("advantage", "episode_advantage", "step_advantage", "returns"):
        # Not bit-equal: sums run in another order, and a tie's rounding noise is divided by std + 1e-6.
        np.testing.assert_allclose(getattr(shuffled, name), getattr(base, name)[list(perm)], rtol=0,
                                   atol=TOLERANCE, err_msg=name)
    np.testing.assert_array_equal(shuffled.step_group_size, base.step_group_size[list(perm)])


@settings(max_examples=50, deadline=None)
@given(batch=batches(equal_lengths=True), shift=st.sampled_from([-7.0, 0.5, 3.0, 100.0]),
       stats=st.sampled_from(["trajectory", "steps"]))
def test_grpo_ignores_a_constant_added_to_all_rewards(batch, shift, stats):
    # With equal trajectory lengths L, every trajectory return moves by shift * L.
    rows = batch.rows()
    moved = StepRows(group=rows.group, traj=rows.traj, step=rows.step, reward=rows.reward + shift, anchor=rows.anchor)
    np.testing.assert_allclose(run("grpo", moved, episode_stats=stats).advantage,
                               run("grpo", rows, episode_stats=stats).advantage, rtol=0, atol=TOLERANCE)


@settings(max_examples=50, deadline=None)
@given(batch=batches(), shift=st.sampled_from([-7.0, 0.5, 3.0, 100.0]))
def test_std_gigpo_ignores_a_constant_added_to_every_outcome(batch, shift):
    # Adding c to each trajectory's final reward moves R(tau) by c and, with gamma = 1, every R_t by c,
    # so both parts are unchanged. (With gamma < 1, R_t moves by c * gamma^(steps left): not a constant.)
    rows = batch.rows()
    last = {}
    for i in np.lexsort((rows.step, rows.traj, rows.group)):
        last[(rows.group[i], rows.traj[i])] = i
    reward = rows.reward.copy()
    reward[list(last.values())] += shift
    moved = StepRows(group=rows.group, traj=rows.traj, step=rows.step, reward=reward, anchor=rows.anchor)
    base, after = run("gigpo", rows, gamma=1.0), run("gigpo", moved, gamma=1.0)
    np.testing.assert_allclose(after.advantage, base.advantage, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(after.step_advantage, base.step_advantage, rtol=0, atol=TOLERANCE)


@settings(max_examples=50, deadline=None)
@given(batch=batches(anchors=None), stats=st.sampled_from(["trajectory", "steps"]), norm=st.sampled_from(["std", "mean"]),
       weight=st.sampled_from([0.5, 1.0]))
def test_gigpo_without_repeated_anchors_is_exactly_grpo(batch, stats, norm, weight):
    rows = batch.rows()  # anchors=None: every row has its own anchor key
    gigpo = run("gigpo", rows, episode_stats=stats, norm=norm, step_weight=weight)
    grpo = run("grpo", rows, episode_stats=stats, norm=norm)
    np.testing.assert_array_equal(gigpo.advantage, grpo.advantage)
    np.testing.assert_array_equal(gigpo.step_group_size, 1)


@settings(max_examples=30, deadline=None)
@given(batch=batches())
def test_std_gigpo_is_scale_free(batch):
    rows = batch.rows()
    scaled = StepRows(group=rows.group, traj=rows.traj, step=rows.step, reward=rows.reward * 1000.0, anchor=rows.anchor)
    # Only approximately: the 1e-6 added to the std does not scale (relative effect 1e-6 / std).
    np.testing.assert_allclose(run("gigpo", scaled).advantage, run("gigpo", rows).advantage, rtol=1e-3, atol=1e-3)


@settings(max_examples=30, deadline=None)
@given(batch=batches(), estimator=ESTIMATORS)
def test_three_key_sort_fallback_gives_the_same_result(batch, estimator):
    """Id ranges too wide for one combined int64 key take the lexsort path; results must not change."""
    import gigpo.advantage.segments as segments

    fast = run(estimator, batch.rows())
    saved = segments.COMBINED_KEY_LIMIT
    segments.COMBINED_KEY_LIMIT = 0
    try:
        slow = run(estimator, batch.rows())
    finally:
        segments.COMBINED_KEY_LIMIT = saved
    np.testing.assert_array_equal(slow.advantage, fast.advantage)
    np.testing.assert_array_equal(slow.step_group_size, fast.step_group_size)
