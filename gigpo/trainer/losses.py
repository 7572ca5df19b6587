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


def distinct_rows(rows: Tensor) -> tuple[Tensor, Tensor]:
    """(used, slot) for `token_logp_entropy`: the distinct logits rows that targets read, sorted, and each
    target's index into them. Computed where the rows are built (on the CPU, at collate time): on a GPU
    `torch.unique` waits for the device."""
    used, slot = torch.unique(rows, return_inverse=True)
    return used, slot.reshape(-1)


class _ChunkedLogpEntropy(torch.autograd.Function):
    """Log-probs (and entropies) of targets under rows of (M, V) logits, in fp32 chunks of rows both ways.

    Why a Function: autograd through chunk slices gives each chunk's backward its own zero (M, V) gradient
    (a slice's backward), summed into the next, so a micro-batch made about two full-size tensors per chunk,
    growing with the square of its rows. Here backward fills one (M, V) gradient chunk by chunk, in the logits'
    dtype, from the closed forms (x = logits / T, p = softmax(x), rows r and target t):
    d lse_r / d x_r = p_r, d H_r / d x_r = -p_r * (log p_r + H_r), d x_{r,t} / d x_r = one-hot(t).
    Only the logits (referenced, not copied) and two fp32 numbers per row are kept for it.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, used: Tensor, slot: Tensor, targets: Tensor, temperature: float,
                with_entropy: bool, chunk_rows: int) -> tuple[Tensor, Tensor]:
        vocab = logits.shape[-1]
        lse = logits.new_empty(used.shape[0], dtype=torch.float32)
        entropy = logits.new_empty(used.shape[0] if with_entropy else 0, dtype=torch.float32)
        for start in range(0, used.shape[0], chunk_rows):
            part = logits.index_select(0, used[start:start + chunk_rows])
            if with_entropy:
                lse[start:start + chunk_rows], entropy[start:start + chunk_rows] = _chunk_lse_entropy(part, temperature)
            else:
                lse[start:start + chunk_rows] = _chunk_lse(part, temperature)
        # one logit per target, read out of the flattened logits (no (N, V) gather)
        picked = logits.reshape(-1).take(used.take(slot) * vocab + targets).float() / temperature
        ctx.save_for_backward(logits, used, slot, targets, lse, entropy)
        ctx.temperature, ctx.with_entropy, ctx.chunk_rows = temperature, with_entropy, chunk_rows
        return picked - lse.take(slot), (entropy.take(slot) if with_entropy else entropy)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp: Tensor, grad_entropy: Tensor):
        logits, used, slot, targets, lse, entropy = ctx.saved_tensors
        temperature, chunk_rows = ctx.temperature, ctx.chunk_rows
        grad = torch.zeros_like(logits)  # the one full-size tensor; rows no target reads stay 0
        grad_logp = grad_logp.float()
        # per distinct row: -sum of its targets' log-prob grads (through -lse) and the sum of their entropy grads
        row_lse = lse.new_zeros(used.shape[0]).index_add_(0, slot, -grad_logp)
        row_entropy = lse.new_zeros(used.shape[0]).index_add_(0, slot, grad_entropy.float()) if ctx.with_entropy else None
        for start in range(0, used.shape[0], chunk_rows):
            rows = used[start:start + chunk_rows]
            count = rows.shape[0]
            end = start + count
            g = logits.index_select(0, rows).float().div_(temperature).sub_(lse[start:end, None])  # log p
            p = g.exp()
            if row_entropy is not None:  # g_lse - g_H * (log p + H)
                g.add_(entropy[start:end, None]).mul_(-row_entropy[start:end, None]).add_(row_lse[start:end, None])
                g.mul_(p)
            else:
                g = p.mul_(row_lse[start:end, None])
            # the targets whose row is in this chunk add their grad at their token (others add 0, no host sync)
            local = slot - start
            inside = (local >= 0) & (local < count)
            g.index_put_((local.clamp(0, count - 1), targets), torch.where(inside, grad_logp, 0.0), accumulate=True)
            grad.index_copy_(0, rows, g.div_(temperature).to(grad.dtype))
        return grad, None, None, None, None, None, None


def token_logp_entropy(logits: Tensor, targets: Tensor, temperature: float = 1.0, with_entropy: bool = False,
                       chunk_rows: int = LOGIT_CHUNK_ROWS, rows: Optional[Tensor] = None,
                       distinct: Optional[tuple[Tensor, Tensor]] = None) -> tuple[Tensor, Optional[Tensor]]:
    """Log-probs of `targets` (N,) under (M, V) logits / temperature, and optionally the entropies.

    Target i is read from logits row `rows[i]` (default: row i, so M = N). Several targets may share a
    row (a prompt's last position predicts the first token of every response to it): each row's
    log-normaliser is computed once, and rows no target reads not at all. `distinct` is `distinct_rows(rows)`
    when the caller has it (computed without a device sync); otherwise it is computed here. Equal to
    log_softmax(logits.float() / T)[rows].gather(targets) and entropy_from_logits, without ever holding
    (M, V) fp32 tensors: rows go through in fp32 chunks forward and backward (`_ChunkedLogpEntropy`), only the
    logits themselves (in the model's dtype) stay alive for backward, and backward allocates one (M, V)
    gradient. With a 49k-token vocabulary the unchunked form kept ~5 (N, V) fp32 tensors for backward:
    1 GiB per 1,000 response tokens.
    """
    if rows is None and targets.dim() == 1:
        rows = torch.arange(targets.shape[0], device=targets.device)
    if logits.dim() != 2 or targets.dim() != 1 or rows is None or rows.shape != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be (M, V), targets {tuple(targets.shape)} (N,) and "
                         f"rows {None if rows is None else tuple(rows.shape)} (N,)")
    if targets.numel() == 0 or logits.shape[0] == 0:  # no rows
        empty = logits.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    used, slot = distinct_rows(rows) if distinct is None else distinct
    if slot.shape != targets.shape:
        raise ValueError(f"distinct rows' slots {tuple(slot.shape)} must be one per target {tuple(targets.shape)}")
    logp, entropy = _ChunkedLogpEntropy.apply(logits, used, slot, targets, temperature, with_entropy, chunk_rows)
    return logp, (entropy if with_entropy else None)
