"""PPO-clip losses as pure torch functions: tensors in, tensors out, no config or I/O.

Every per-token tensor is (B, T) with a matching `mask` (1 on response tokens, 0 elsewhere); the
caller broadcasts a step's advantage to its tokens. Aggregation takes an optional `denominator` so a
mini-batch split into micro-batches (and ranks) sums to exactly the loss of the whole mini-batch:
pass the mini-batch's token count (token-mean) or sequence count (seq-mean).
"""
from __future__ import annotations

from typing import Literal, Optional

import torch
from torch import Tensor

LossAgg = Literal["token-mean", "seq-mean"]
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean")


def aggregate(values: Tensor, mask: Tensor, mode: LossAgg, denominator: Optional[float] = None) -> Tensor:
    """Reduce (B, T) per-token values to a scalar over the masked tokens.

    token-mean: sum(values * mask) / denominator, denominator = number of masked tokens by default;
    every token weighs the same, so long responses weigh more.
    seq-mean: each sequence's token mean, summed and divided by denominator (number of sequences with
    at least one masked token by default); every response weighs the same.
    """
    if values.shape != mask.shape:
        raise ValueError(f"values shape {tuple(values.shape)} must equal mask shape {tuple(mask.shape)}")
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        total = (values * mask).sum()
        count = mask.sum() if denominator is None else denominator
    elif mode == "seq-mean":
        tokens = mask.sum(-1)  # (B,)
        per_seq = (values * mask).sum(-1) / tokens.clamp(min=1.0)
        total = per_seq.sum()
        count = (tokens > 0).sum() if denominator is None else denominator
    else:
        raise ValueError(f"loss aggregation {mode!r} is unknown; choose one of {', '.join(LOSS_AGG_MODES)}")
    if isinstance(count, Tensor):
        count = count.clamp(min=1)
    elif count <= 0:
        raise ValueError(f"denominator={count} must be positive")
    return total / count


def policy_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, clip_low: float, clip_high: float) -> tuple[Tensor, Tensor]:
    """Per-token PPO-clip loss with separate clip ratios (DAPO's clip-higher when clip_high > clip_low).

    loss = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A), r = exp(logp - logp_old).
    Returns (loss, clipped) per token; `clipped` is 1.0 where the clipped term was the one taken.
    """
    ratio = torch.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).to(logp.dtype)
    return loss, was_clipped


def kl_k3(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = logp_ref - logp.

    Unbiased, always >= 0, and lower variance than log(p/q) (Schulman, "Approximating KL divergence").
    """
    delta = logp_ref - logp
    return torch.exp(delta) - delta - 1.0


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution at each position: (..., V) -> (...)."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def value_loss(values: Tensor, values_old: Tensor, returns: Tensor, clip: Optional[float] = None) -> Tensor:
    """Per-token critic loss 0.5 * (V - R)^2; with `clip`, PPO's pessimistic clipped-value form."""
    loss = (values - returns) ** 2
    if clip is not None:
        clipped = values_old + (values - values_old).clamp(-clip, clip)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return 0.5 * loss
