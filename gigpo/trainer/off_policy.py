"""Stale samples (rollout.mode=async): how many policy versions a sample lags the trainer.

The correction of stale samples (truncated importance weights, decoupled PPO) is the rollout correction's,
shared with sync mode: gigpo/trainer/rollout_correction.py.
"""
from __future__ import annotations

from typing import Sequence


def staleness(trainer_version: int, sample_versions: Sequence[int], bound: int) -> dict[str, float]:
    """Trainer version minus each sample's policy version, checked against the bound (a violated bound
    is a scheduling bug: the pipeline never starts a rollout that could exceed it)."""
    lags = [trainer_version - v for v in sample_versions]
    if lags and (max(lags) > bound or min(lags) < 0):
        raise RuntimeError(f"samples of policy versions {sorted(set(sample_versions))} reached the update at trainer "
                           f"version {trainer_version}: staleness {max(lags)} breaks rollout.max_staleness={bound} "
                           "(or a sample is newer than the trainer)")
    return {"async/staleness_max": float(max(lags, default=0)),
            "async/staleness_mean": float(sum(lags) / len(lags)) if lags else 0.0}
