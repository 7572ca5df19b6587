"""`gigpo eval`'s standard errors: a task type's rate is over that type's episodes, not all of them."""
from __future__ import annotations

import math

from gigpo.advantage.rows import StepRows
from gigpo.rollout.records import EpisodeSummary, Rollout
from gigpo.trainer.evaluation import binomial_standard_error, episode_counts


def _rollout(outcomes: list[tuple[str, bool]]) -> Rollout:
    episodes = [EpisodeSummary(traj=i, group=i, seed=i, won=won, episode_return=float(won), length=3,
                               invalid_steps=0, task_type=kind, error=None) for i, (kind, won) in enumerate(outcomes)]
    return Rollout(steps=StepRows.empty(), episodes=episodes)


def test_each_success_rate_is_counted_over_its_own_episodes() -> None:
    result = _rollout([("heat", i < 3) for i in range(12)] + [("cool", True), ("cool", False)])
    metrics, counts = result.metrics("eval/"), episode_counts(result, "eval/")
    assert counts == {"eval/success": 14, "eval/success/heat": 12, "eval/success/cool": 2}
    assert set(counts) == {k for k in metrics if "success" in k}  # every printed rate has its count
    cool = metrics["eval/success/cool"]
    assert cool == 0.5
    assert math.isclose(binomial_standard_error(cool, counts["eval/success/cool"]), math.sqrt(0.25 / 2))
    # over all 14 episodes it would read 13.4%, not the 35.4% two episodes give
    assert binomial_standard_error(cool, 2) > 2.5 * binomial_standard_error(cool, 14)


def test_standard_error_at_the_bounds_and_without_episodes() -> None:
    assert binomial_standard_error(1.0, 5) == 0.0 and binomial_standard_error(0.0, 5) == 0.0
    assert math.isnan(binomial_standard_error(0.5, 0))
