"""The task-by-task pairing of two final evaluations (gigpo/experiments/heldout.py), on a hand case where every count
differs, so a swapped or miscounted cell shows."""
from __future__ import annotations

import pytest

from gigpo.experiments.heldout import task_agreement


def test_tasks_are_paired_by_seed_and_counted_once_each() -> None:
    a = {1: True, 2: True, 3: False, 4: False, 5: True, 6: True, 7: True}
    b = {1: True, 2: False, 3: True, 4: False, 5: False, 6: False, 8: True}  # 7 and 8: one run only, left out
    ag = task_agreement(a, b)
    assert (ag.tasks, ag.both, ag.only_a, ag.only_b, ag.neither) == (6, 1, 3, 1, 1)
    assert ag.p_mcnemar == pytest.approx(0.625)  # 3 of 4 discordant rooms to a: 2 * P(X >= 3 | n=4, 1/2) = 10/16
    assert task_agreement(b, a).only_a == 1


def test_identical_win_sets_give_no_discordant_room_and_p_1() -> None:
    won = {seed: seed % 3 == 0 for seed in range(30)}
    ag = task_agreement(won, dict(won))
    assert (ag.both, ag.only_a, ag.only_b, ag.neither, ag.p_mcnemar) == (10, 0, 0, 20, 1.0)
