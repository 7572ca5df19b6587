"""Small batches whose advantages are worked out by hand from the definitions."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gigpo.advantage import StepRows, compute_advantages

EPS = 1e-6
DEFAULTS = dict(gamma=0.95, lam=0.95, step_weight=1.0, norm="std", episode_stats="trajectory", similarity=None)


def run(estimator: str, rows: StepRows, **overrides):
    return compute_advantages(estimator, rows, **{**DEFAULTS, **overrides})


def test_gigpo_two_trajectories_sharing_the_first_state():
    # group 0: traj 0 wins (reward 1 at its 2nd step), traj 1 fails; both start in state 5.
    rows = StepRows(group=[0, 0, 0, 0, 1], traj=[0, 0, 1, 1, 0], step=[0, 1, 0, 1, 0],
                    reward=[0, 1, 0, 0, 1], anchor=[5, 6, 5, 7, 5])
    out = run("gigpo", rows)
    episode = 0.5 / (math.sqrt(0.5) + EPS)               # returns 1 and 0: mean 0.5, unbiased std sqrt(0.5)
    step = 0.475 / (0.475 * math.sqrt(2) + EPS)          # R_0 = 0.95 and 0 in step group "5"
    np.testing.assert_allclose(out.episode_advantage, [episode, episode, -episode, -episode, 0.0])
    np.testing.assert_allclose(out.step_advantage, [step, 0.0, -step, 0.0, 0.0])
    np.testing.assert_allclose(out.advantage, [episode + step, episode, -episode - step, -episode, 0.0])
    np.testing.assert_array_equal(out.step_group_size, [2, 1, 2, 1, 1])   # group 1's state 5 is its own
    np.testing.assert_allclose(out.returns, [0.95, 1.0, 0.0, 0.0, 1.0])


def test_step_min_spread_drops_step_groups_that_differ_only_by_step_penalties():
    # group 0: three trajectories pass state 4. Two fail (returns -0.1 and -0.19 from there: penalties
    # only), one wins from state 8. Step group "4" spans 11.0 - (-0.19); group "8" (one row) is a singleton.
    rows = StepRows(group=[0, 0, 0, 0, 0, 0], traj=[0, 0, 1, 1, 2, 2], step=[0, 1, 0, 1, 0, 1],
                    reward=[-0.1, -0.1, -0.1, 0.0, -0.1, 11.0], anchor=[4, 5, 4, 6, 8, 4])
    kept = run("gigpo", rows, gamma=0.9)
    dropped = run("gigpo", rows, gamma=0.9, step_min_spread=1.0)
    # rows of anchor 4: returns -0.19, -0.1, 11.0: spread 11.19 > 1, so the group keeps its step advantage
    np.testing.assert_allclose(dropped.step_advantage, kept.step_advantage)
    # now only the two failures share state 4 (the winner's row is in another group): spread 0.09 <= 1
    rows2 = StepRows(group=[0, 0, 0, 0, 1, 1], traj=[0, 0, 1, 1, 2, 2], step=[0, 1, 0, 1, 0, 1],
                     reward=[-0.1, -0.1, -0.1, 0.0, -0.1, 11.0], anchor=[4, 5, 4, 6, 8, 4])
    kept2 = run("gigpo", rows2, gamma=0.9)
    dropped2 = run("gigpo", rows2, gamma=0.9, step_min_spread=1.0)
    assert abs(kept2.step_advantage[0]) > 0.5   # std normalisation turns a 0.09 gap into about +-0.7
    np.testing.assert_allclose(dropped2.step_advantage, 0.0)
    np.testing.assert_allclose(dropped2.episode_advantage, kept2.episode_advantage)
    with pytest.raises(ValueError, match="step_min_spread"):
        run("gigpo", rows, step_min_spread=-1.0)


def test_repeat_visits_of_one_trajectory_form_a_step_group_and_steps_order_by_index_not_input():
    # One trajectory loops back to state 1: steps 0 and 2 (given out of order, with gaps in the index).
    rows = StepRows(group=[0, 0, 0, 0], traj=[0, 0, 0, 1], step=[20, 0, 10, 0], reward=[1, 0, 0, 0], anchor=[3, 1, 1, 9])
    out = run("gigpo", rows, gamma=0.5, norm="mean")
    # traj 0 in step order: rewards 0, 0, 1 -> R = 0.25, 0.5, 1
    np.testing.assert_allclose(out.returns, [1.0, 0.25, 0.5, 0.0])
    np.testing.assert_allclose(out.step_advantage, [0.0, -0.125, 0.125, 0.0])
    np.testing.assert_allclose(out.episode_advantage, [0.5, 0.5, 0.5, -0.5])
    np.testing.assert_array_equal(out.step_group_size, [1, 2, 2, 1])


def test_episode_stats_steps_weights_trajectories_by_length():
    rows = StepRows(group=[0, 0, 0, 0], traj=[0, 1, 1, 1], step=[0, 0, 1, 2], reward=[1, 0, 0, 0], anchor=[1, 2, 3, 4])
    paper = run("grpo", rows)
    np.testing.assert_allclose(paper.advantage, [0.5, -0.5, -0.5, -0.5] / np.float64(math.sqrt(0.5) + EPS))
    reference_code = run("grpo", rows, episode_stats="steps")      # row values 1,0,0,0: mean .25, std .5
    np.testing.assert_allclose(reference_code.advantage, [0.75 / (0.5 + EPS)] + [-0.25 / (0.5 + EPS)] * 3)


def test_single_trajectory_groups_and_singleton_step_groups_get_zero():
    rows = StepRows(group=[0, 0, 1], traj=[0, 0, 0], step=[0, 1, 0], reward=[3, 4, 5], anchor=[1, 1, 1])
    for stats in ("trajectory", "steps"):
        out = run("gigpo", rows, episode_stats=stats)
        np.testing.assert_array_equal(out.episode_advantage, 0.0)
    out = run("gigpo", rows)
    assert out.step_group_size.tolist() == [2, 2, 1]
    assert out.step_advantage[2] == 0.0 and out.step_advantage[0] > 0 > out.step_advantage[1]  # R: 7.8 vs 4


def test_equal_returns_give_zero_not_nan():
    rows = StepRows(group=[0, 0], traj=[0, 1], step=[0, 0], reward=[2.0, 2.0], anchor=[1, 1])
    out = run("gigpo", rows)
    np.testing.assert_array_equal(out.advantage, [0.0, 0.0])


def test_rloo_subtracts_the_mean_of_the_other_trajectories():
    rows = StepRows(group=[0, 0, 0, 0, 7], traj=[0, 1, 2, 2, 0], step=[0, 0, 0, 1, 0], reward=[1, 2, 5, 1, 4], anchor=[0] * 5)
    out = run("rloo", rows)
    np.testing.assert_allclose(out.advantage, [1 - 4, 2 - 3.5, 6 - 1.5, 6 - 1.5, 0.0])


def test_ppo_gae_bootstraps_from_the_next_turn_value():
    rows = StepRows(group=[0, 0, 0], traj=[0, 0, 0], step=[2, 0, 1], reward=[1, 0, 0], anchor=[0, 0, 0], value=[0.7, 0.5, 0.6])
    out = run("ppo", rows, gamma=0.9, lam=0.8)
    # deltas: 0 + .9*.6 - .5 = .04; 0 + .9*.7 - .6 = .03; 1 + 0 - .7 = .3 ; A = delta + .72 * A_next
    a2 = 0.3
    a1 = 0.03 + 0.72 * a2
    a0 = 0.04 + 0.72 * a1
    np.testing.assert_allclose(out.advantage, [a2, a0, a1])
    np.testing.assert_allclose(out.returns, [a2 + 0.7, a0 + 0.5, a1 + 0.6])
    assert out.step_group_size.tolist() == [1, 1, 1] and not out.episode_advantage.any()


@pytest.mark.parametrize("estimator", ["gigpo", "grpo", "rloo", "ppo"])
def test_empty_batch_gives_empty_result(estimator):
    rows = StepRows(group=[], traj=[], step=[], reward=[], anchor=[], value=[])
    out = run(estimator, rows)
    assert out.advantage.shape == (0,) and out.step_group_size.shape == (0,)


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
@pytest.mark.parametrize("episode_stats", ["trajectory", "steps"])
def test_equal_returns_that_do_not_sum_exactly_give_exactly_zero(estimator, episode_stats):
    # -0.1 per step over 3 steps: the group mean is -0.30000000000000004, and the rounding left after
    # subtracting it, divided by std + 1e-6, used to come out near 1e-11 instead of 0
    rows = StepRows(group=[0] * 9, traj=[0, 0, 0, 1, 1, 1, 2, 2, 2], step=[0, 1, 2] * 3, reward=[-0.1] * 9,
                    anchor=[1, 2, 3, 1, 2, 3, 1, 2, 3])
    out = run(estimator, rows, episode_stats=episode_stats)
    assert np.all(out.advantage == 0.0) and np.all(out.episode_advantage == 0.0) and np.all(out.step_advantage == 0.0)
