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


LOGIT_CHUNK_ROWS = 256
"""Positions per chunk in `token_logp_entropy`: 256 x 49,152 fp32 is 48 MiB of temporaries at a time."""


def _chunk_lse_entropy(logits: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    x = logits.float() / temperature  # (n, V) fp32, one chunk only
    lse = torch.logsumexp(x, dim=-1)  # (n,)
    return lse, lse - (torch.softmax(x, dim=-1) * x).sum(-1)  # H = logsumexp(x) - E_p[x]


def _chunk_lse(logits: Tensor, temperature: float) -> Tensor:
    return torch.logsumexp(logits.float() / temperature, dim=-1)


def token_logp_entropy(logits: Tensor, targets: Tensor, temperature: float = 1.0, with_entropy: bool = False,
                       chunk_rows: int = LOGIT_CHUNK_ROWS, rows: Optional[Tensor] = None
                       ) -> tuple[Tensor, Optional[Tensor]]:
    """Log-probs of `targets` (N,) under (M, V) logits / temperature, and optionally the entropies.

    Target i is read from logits row `rows[i]` (default: row i, so M = N). Several targets may share a
    row (a prompt's last position predicts the first token of every response to it): each row's
    log-normaliser is computed once. Equal to log_softmax(logits.float() / T)[rows].gather(targets) and
    entropy_from_logits, without ever holding (M, V) fp32 tensors: rows go through in chunks, and under
    autograd each chunk is recomputed in backward (activation checkpointing), so only the logits
    themselves (in the model's dtype) stay alive. With a 49k-token vocabulary the unchunked form kept
    ~5 (N, V) fp32 tensors for backward: 1 GiB per 1,000 response tokens.
    """
    from torch.utils.checkpoint import checkpoint

    if rows is None and targets.dim() == 1:
        rows = torch.arange(targets.shape[0], device=targets.device)
    if logits.dim() != 2 or targets.dim() != 1 or rows is None or rows.shape != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be (M, V), targets {tuple(targets.shape)} (N,) and "
                         f"rows {None if rows is None else tuple(rows.shape)} (N,)")
    grad = torch.is_grad_enabled() and logits.requires_grad
    lses, entropies = [], []
    for start in range(0, logits.shape[0], chunk_rows):
        part = logits[start:start + chunk_rows]
        fn = _chunk_lse_entropy if with_entropy else _chunk_lse
        out = checkpoint(fn, part, temperature, use_reentrant=False) if grad else fn(part, temperature)
        if with_entropy:
            lses.append(out[0])
            entropies.append(out[1])
        else:
            lses.append(out)
    if not lses or targets.numel() == 0:  # no rows
        empty = logits.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    # one logit per target, read out of the flattened logits: its backward scatters N numbers, where
    # gathering whole (N, V) rows first cost a (N, V) copy and a slow accumulating scatter in backward
    picked = logits.reshape(-1).take(rows * logits.shape[-1] + targets).float() / temperature
    logp = picked - torch.cat(lses).take(rows)
    return logp, (torch.cat(entropies).take(rows) if with_entropy else None)
