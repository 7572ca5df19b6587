"""Dynamic-sampling filter, step-group diagnostics, and process-independent anchor keys."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from batches import ANY_REWARDS, batches
import pytest
from hypothesis import given, settings
from naive_advantage import naive_informative_groups

from gigpo.advantage import StepRows, anchor_key, anchor_keys, compute_advantages, informative_groups, step_group_diagnostics


@settings(max_examples=80, deadline=None)
@given(batch=batches(rewards=ANY_REWARDS))
def test_informative_groups_match_loops(batch):
    mask = informative_groups(batch.rows())
    assert mask.tolist() == naive_informative_groups(batch.group, batch.traj, batch.reward)


def test_dynamic_sampling_drops_all_equal_and_single_trajectory_groups():
    rows = StepRows(group=[0, 0, 0, 1, 1, 2, 3, 3], traj=[0, 0, 1, 0, 1, 0, 0, 1], step=[0, 1, 0, 0, 0, 0, 0, 0],
                    reward=[0, 1, 1, 5, 5, 3, 0, 1], anchor=[0] * 8)
    mask = informative_groups(rows)
    # group 0: returns 1 and 1 (equal, across different lengths); 1: 5, 5; 2: one trajectory; 3: 0 vs 1
    assert mask.tolist() == [False] * 6 + [True, True]
    kept = rows.select(mask)
    assert kept.group.tolist() == [3, 3] and kept.reward.tolist() == [0, 1]


def test_diagnostics_count_step_groups_and_sizes():
    # group 0 anchors: 1,1,1 | 2 | 3,3 -> step groups of sizes 3, 1, 2; group 1: anchor 1 alone (size 1).
    rows = StepRows(group=[0] * 6 + [1], traj=[0, 1, 2, 0, 1, 2, 0], step=[0, 0, 0, 1, 1, 1, 0],
                    reward=[0, 0, 0, 1, 0, 0, 1], anchor=[1, 1, 1, 2, 3, 3, 1])
    result = compute_advantages("gigpo", rows, gamma=0.95, lam=0.95, step_weight=1.0, norm="std",
                                episode_stats="trajectory", similarity=None)
    stats = step_group_diagnostics(result)
    assert all(isinstance(v, float) for v in stats.values())
    assert stats["adv/step_groups"] == 4.0
    assert stats["adv/singleton_row_share"] == 2 / 7
    assert stats["adv/step_group_size_mean"] == 7 / 4
    assert stats["adv/step_group_size_max"] == 3.0
    assert [stats[f"adv/step_group_size/{s}"] for s in (1, 2, 3, 4)] == [0.5, 0.25, 0.25, 0.0]
    assert stats["adv/step_group_size/gt16"] == 0.0
    # step-level signal: only anchor 1's group has unequal returns (0.95, 0, 0); anchor 3's are equal, the rest alone
    assert stats["adv/step_signal_share"] == 3 / 7
    grpo = compute_advantages("grpo", rows, gamma=0.95, lam=0.95, step_weight=1.0, norm="std",
                              episode_stats="trajectory", similarity=None)
    assert step_group_diagnostics(grpo)["adv/step_signal_share"] == 0.0


def test_anchor_keys_are_the_same_in_other_processes():
    texts = ["Nothing happens.", "You are in the middle of a room.", "", "é€"]
    here = anchor_keys(texts).tolist()
    assert len(set(here)) == len(texts) and here[0] == anchor_key(texts[0])
    code = "import sys; from gigpo.advantage import anchor_keys; print(anchor_keys(sys.argv[1:]).tolist())"
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        out = subprocess.run([sys.executable, "-c", code, *texts], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert eval(out.stdout) == here


def test_size_quantiles_and_multi_row_share_are_per_row():
    from gigpo.advantage import revisit_diagnostics

    # same rows as above: per-row step-group sizes 3,3,3,1,2,2,1
    rows = StepRows(group=[0] * 6 + [1], traj=[0, 1, 2, 0, 1, 2, 0], step=[0, 0, 0, 1, 1, 1, 0],
                    reward=[0, 0, 0, 1, 0, 0, 1], anchor=[1, 1, 1, 2, 3, 3, 1])
    result = compute_advantages("gigpo", rows, gamma=0.95, lam=0.95, step_weight=1.0, norm="std",
                                episode_stats="trajectory", similarity=None)
    stats = step_group_diagnostics(result)
    assert stats["adv/step_group_multi_row_share"] == 5 / 7
    assert stats["adv/step_group_size_p50"] == 2.0 and stats["adv/step_group_size_p90"] == 3.0  # sorted 1,1,2,2,3,3,3
    # GRPO has no step groups, but the revisit view groups its rows by anchor all the same
    grpo = compute_advantages("grpo", rows, gamma=0.95, lam=0.95, step_weight=1.0, norm="std",
                              episode_stats="trajectory", similarity=None)
    assert step_group_diagnostics(grpo)["adv/step_group_multi_row_share"] == 0.0
    revisit = revisit_diagnostics(rows)
    assert revisit["revisit/multi_row_share"] == 5 / 7 and revisit["revisit/group_size_mean"] == 7 / 4
    assert revisit["revisit/self_revisit_share"] == 0.0


def test_revisits_of_a_trajectorys_own_states_are_counted_as_loops():
    from gigpo.advantage import revisit_diagnostics

    # trajectory 0 walks A B A A (two returns to A), trajectory 1 walks A C: 6 rows, 2 of them loops
    rows = StepRows(group=[0] * 6, traj=[0, 0, 0, 0, 1, 1], step=[0, 1, 2, 3, 0, 1], reward=[0] * 6,
                    anchor=[7, 8, 7, 7, 7, 9])
    revisit = revisit_diagnostics(rows)
    assert revisit["revisit/self_revisit_share"] == pytest.approx(2 / 6)
    assert revisit["revisit/multi_row_share"] == pytest.approx(4 / 6)    # the four visits of A
    assert revisit["revisit/size_p90"] == 4.0
