"""Stale samples (rollout.mode=async): truncated importance weights on the PPO-clip loss, and staleness.

In async mode the policy that sampled a response (the behaviour policy: the generator's weights, up to
`rollout.max_staleness` versions old) is not the one the update starts from (the proximal policy: the
trainer's weights before this update). Decoupled PPO (Hilton et al., 2022; used by AReaL) keeps the two
apart:

    loss_t = w_t * PPO-clip(r_t, A),  r_t = exp(logp_t - logp_old_t),  w_t = min(exp(logp_old_t - logp_behaviour_t), C)

The trust region stays around the proximal policy (`logp_old`, recomputed by the trainer), and w turns the
expectation over the behaviour policy's samples into one over the proximal policy's. w does not depend on
the weights being trained, so it is computed once per sample, before the update (`importance_weights`).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from gigpo.trainer.losses import policy_loss

DEFAULT_CAP = 2.0
"""C, the default of rollout.importance_cap. Why 2: PPO moves a token's probability by a few tens of percent
per update, so between policies one or two versions apart the weights of nearly all tokens lie well inside
[0.5, 2] and pass unchanged; C bounds the variance of the rare token the newer policy finds much likelier
than the stale one did. C = 1 (V-trace's rho-bar) would also cut every up-weight of an ordinary token,
shrinking the update toward the behaviour policy's; much larger caps let one token dominate a mini-batch.
The logged truncated share (async/is_truncated_share) says whether the cap binds."""


def truncated_importance_weights(logp_old: Tensor, logp_behaviour: Tensor, cap: float = DEFAULT_CAP) -> Tensor:
    """Per-token w = min(exp(logp_old - logp_behaviour), cap), with no gradient (a constant per sample)."""
    if logp_old.shape != logp_behaviour.shape:
        raise ValueError(f"logp_old {tuple(logp_old.shape)} and logp_behaviour {tuple(logp_behaviour.shape)} must have "
                         "one entry per response token each")
    if cap < 1.0:
        raise ValueError(f"importance cap C={cap} must be at least 1 (rollout.importance_cap)")
    return torch.exp(logp_old.detach().double() - logp_behaviour.detach().double()).clamp(max=cap).to(logp_old.dtype)


def weighted_policy_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, weights: Tensor, clip_low: float,
                         clip_high: float) -> tuple[Tensor, Tensor]:
    """Decoupled PPO's per-token loss: the PPO-clip loss around logp_old, times the behaviour weights.
    Returns (loss, clipped) as `policy_loss` does."""
    loss, clipped = policy_loss(logp, logp_old, advantages, clip_low, clip_high)
    return loss * weights, clipped


def importance_weights(logp_old: Sequence[Tensor], logp_behaviour: Sequence[Sequence[float]], cap: float
                       ) -> tuple[list[Tensor], dict[str, float]]:
    """Each sample's weights, and their mean and the share of tokens the cap cut (over every response token)."""
    weights, raw_all = [], []
    for old, behaviour in zip(logp_old, logp_behaviour):
        behaviour_t = torch.as_tensor(behaviour, dtype=old.dtype)
        weights.append(truncated_importance_weights(old, behaviour_t, cap))
        raw_all.append(old.detach().double() - behaviour_t.double())
    raw = torch.cat(raw_all) if raw_all else torch.zeros(0, dtype=torch.float64)
    cut = (raw > torch.log(torch.tensor(cap, dtype=torch.float64))).double()
    flat = torch.cat(weights).double() if weights else raw
    return weights, {"async/is_weight_mean": float(flat.mean()) if flat.numel() else 1.0,
                     "async/is_truncated_share": float(cut.mean()) if cut.numel() else 0.0}


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
