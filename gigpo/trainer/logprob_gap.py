"""How far the generator's log-probs are from the trainer's on the same tokens: the `rollout/logp_gap_*`
metrics, which show a generator/trainer mismatch (a stale sync, another precision or kernel) as it happens."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def logprob_gap(generator_logps: Sequence[Sequence[float]], trainer_logps: Sequence[Any]) -> tuple[float, int, float]:
    """How far the generator's log-probs are from the trainer's: the sum, count and max of |diff| over the
    response tokens (sharding.merge_gaps adds the ranks' up; gap_metrics makes the metrics)."""
    if not generator_logps:
        return 0.0, 0, float("-inf")
    diffs = np.concatenate([np.abs(np.asarray(g, dtype=np.float64) - t.double().numpy())
                            for g, t in zip(generator_logps, trainer_logps)])
    return float(diffs.sum()), int(diffs.size), float(diffs.max())


def gap_metrics(gap: tuple[float, int, float]) -> dict[str, float]:
    """`rollout/logp_gap_mean` and `_max` per response token (none when no token was compared)."""
    total, count, largest = gap
    return {"rollout/logp_gap_mean": total / count, "rollout/logp_gap_max": largest} if count else {}
