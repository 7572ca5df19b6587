"""Rollout correction: the generator (behaviour policy) is not the trainer, in sync and async mode alike.

The generator samples with its own kernels (vLLM) and, in async mode, with weights up to
`rollout.max_staleness` versions old; the trainer scores the same tokens with its own forward. Decoupled
PPO (Hilton et al., 2022; AReaL) keeps the two apart:

    loss_t = w_t * m_s * PPO-clip(r_t, A),  r_t = exp(logp_t - logp_old_t),
    w_t = min(exp(logp_old_t - logp_behaviour_t), C)

The trust region stays around the trainer's old log-probs, and w turns the expectation over the generator's
samples into one over the trainer's policy (token-level truncated importance sampling, TIS). m_s is 0 for a
step whose ratio exp(sum_t (logp_old_t - logp_behaviour_t)) ("seq-mask") or its geometric mean over tokens
("geo-mask") falls outside [mask_low, mask_high] (masked importance sampling, MIS): such a step is left out
of the update (its tokens still count in the loss's denominator, as PPO's clipped tokens do).

With `trainer.old_logprobs: generator` there is no recompute, so logp_old *is* logp_behaviour and w would be
1: the PPO ratio exp(logp - logp_behaviour) itself carries the mismatch (verl's "bypass" mode). There the
trainer's side of the correction is the live log-prob (detached), the step mask reads it the same way, and the
token truncation caps the ratio's unclipped branch at C (dual-clip PPO with c = C: a token the trainer finds
far likelier than the generator did, with A < 0, contributes at most C * |A| and no gradient).

Every weight is a constant per sample (no gradient), computed in fp64 from the fp32 log-probs.
`correction_terms` is the one place both modes compute it; the actor's loss calls it per micro-batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch
from torch import Tensor

from gigpo.trainer.losses import kl_k3, policy_loss

CORRECTION_MODES: tuple[str, ...] = ("auto", "none", "token", "seq-mask", "geo-mask", "token+seq-mask",
                                     "token+geo-mask")
"""algorithm.rollout_correction's values; auto: token in rollout.mode=async (decoupled PPO), none in sync."""

SUM = "correction_sum/"
"""Prefix of the per-micro-batch sums the actor's update turns into `correction/*` means (`correction_means`)."""


@dataclass(frozen=True)
class Correction:
    """A resolved algorithm.rollout_correction (no `auto`): what the actor's loss applies."""

    token: bool
    """Truncated token weights min(exp(logp_trainer - logp_behaviour), cap)."""
    mask: Optional[Literal["seq", "geo"]]
    """Step mask on the sequence ratio (seq) or its geometric mean over tokens (geo); None: no mask."""
    cap: float
    """rollout.importance_cap (its default and why: gigpo.config)."""
    mask_low: float
    mask_high: float

    def __post_init__(self) -> None:
        if self.cap < 1.0:
            raise ValueError(f"importance cap C={self.cap} must be at least 1 (rollout.importance_cap)")
        if not 0.0 < self.mask_low <= 1.0 <= self.mask_high:
            raise ValueError(f"mask bounds [{self.mask_low}, {self.mask_high}] must hold 1 with a positive low end "
                             "(algorithm.correction_mask_low <= 1 <= algorithm.correction_mask_high)")


def resolve_correction(mode: str, async_mode: bool, cap: float, mask_low: float, mask_high: float
                       ) -> Optional[Correction]:
    """algorithm.rollout_correction -> Correction, None when off; auto keeps each mode's behaviour of before
    the setting existed."""
    if mode not in CORRECTION_MODES:
        raise ValueError(f"algorithm.rollout_correction={mode!r} is unknown; "
                         f"choose one of {', '.join(CORRECTION_MODES)}")
    if mode == "auto":
        mode = "token" if async_mode else "none"
    parts = set(mode.split("+")) - {"none"}
    mask = "seq" if "seq-mask" in parts else "geo" if "geo-mask" in parts else None
    if not parts:
        return None
    return Correction(token="token" in parts, mask=mask, cap=cap, mask_low=mask_low, mask_high=mask_high)


def correction_from_config(config: Any) -> Optional[Correction]:
    """The run's Correction, None when off (the actor's loss and the rollout pipeline read the same one)."""
    a = config.algorithm
    return resolve_correction(a.rollout_correction, config.rollout.mode == "async", config.rollout.importance_cap,
                              a.correction_mask_low, a.correction_mask_high)


def old_logprobs_from_generator(config: Any) -> bool:
    """Whether the generator's log-probs serve as the PPO ratio's old ones (trainer.old_logprobs).

    `auto` takes them only where they are the actor's own up to float rounding: the hf backend holds
    the actor's weights in the same dtype, and at temperature 1 both score the same distribution.
    """
    choice = config.trainer.old_logprobs
    if config.rollout.mode == "async":  # the generator's are a stale policy's: the behaviour log-probs
        return False
    if choice != "auto":
        return choice == "generator"
    return config.rollout.backend == "hf" and config.model.dtype == "fp32" and config.rollout.temperature == 1.0


def logp_gap_due(config: Any, iteration: int) -> bool:
    """Whether `iteration` (from 1) measures the generator-trainer gap `rollout/logp_gap_*` (rollout.logp_gap_every)."""
    every = config.rollout.logp_gap_every
    return every > 0 and (iteration - 1) % every == 0


def generator_logprobs_needed(config: Any, iteration: int) -> bool:
    """Whether the rollout trained on in `iteration` must ask the generator for the sampled tokens' log-probs:
    the rollout correction and old log-probs taken from the generator read them every iteration, the gap
    metric on the iterations it is due. Otherwise vLLM computes none (SamplingSettings.logprobs)."""
    return (correction_from_config(config) is not None or old_logprobs_from_generator(config)
            or logp_gap_due(config, iteration))


def correction_terms(logp_trainer: Tensor, logp_behaviour: Tensor, mask: Tensor, c: Correction
                     ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Per-token weights (B, T), per-step keep mask (B,) and the mismatch sums of a micro-batch.

    `logp_trainer`, `logp_behaviour`, `mask`: (B, T), `mask` 1 on response tokens. weights are
    min(exp(logp_trainer - logp_behaviour), C) where `c.token`, else 1; keep is 0 for a step whose ratio
    (or geometric mean) lies outside the bounds, else 1. The sums (under SUM) hold, over response tokens:
    the token count, the sum of the truncated ratio, the count of tokens the cap cut, the k3 estimate of
    KL(generator || trainer), and the count of steps and of masked steps: `correction_means` makes them
    the logged `correction/*` figures, whatever the mode (the mismatch shows even where nothing is cut).
    The sums stay 0-dim fp64 tensors on the device: the trainer reads them once per update, not per micro-batch.
    """
    if logp_trainer.shape != logp_behaviour.shape or logp_trainer.shape != mask.shape:
        raise ValueError(f"logp_trainer {tuple(logp_trainer.shape)}, logp_behaviour {tuple(logp_behaviour.shape)} and "
                         f"mask {tuple(mask.shape)} must all be (B, T): one entry per response token")
    m = mask.detach().double()
    log_ratio = (logp_trainer.detach().double() - logp_behaviour.detach().double()) * m  # (B, T), 0 off the response
    truncated = torch.exp(log_ratio).clamp(max=c.cap)  # (B, T) fp64
    cut = (log_ratio > math.log(c.cap)).double() * m
    tokens = m.sum(-1)  # (B,)
    seq_log_ratio = log_ratio.sum(-1)  # (B,) log of the sequence ratio
    if c.mask == "geo":
        seq_log_ratio = seq_log_ratio / tokens.clamp(min=1.0)
    steps = (tokens > 0).double()
    if c.mask is None:
        keep = torch.ones_like(tokens)
    else:
        keep = ((seq_log_ratio >= math.log(c.mask_low)) & (seq_log_ratio <= math.log(c.mask_high))).double()
    k3 = kl_k3(logp_behaviour.detach().double(), logp_trainer.detach().double()) * m  # samples are the generator's
    weights = truncated if c.token else torch.ones_like(truncated)
    dtype = logp_trainer.dtype
    sums = {"tokens": m.sum(), "weight": (truncated * m).sum(), "truncated": cut.sum(), "kl_k3": k3.sum(),
            "steps": steps.sum(), "masked": ((1.0 - keep) * steps).sum()}
    return weights.to(dtype), keep.to(dtype), {SUM + k: v for k, v in sums.items()}


def corrected_policy_loss(logp: Tensor, logp_old: Tensor, logp_behaviour: Tensor, advantages: Tensor, mask: Tensor,
                          clip_low: float, clip_high: float, c: Correction, old_is_behaviour: bool
                          ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """The PPO-clip loss per token with the rollout correction, its clipped flags and the mismatch sums.

    old_is_behaviour=False (the trainer recomputed logp_old): loss = w * keep * PPO-clip(exp(logp - logp_old)),
    weights and mask from logp_old against the generator's. old_is_behaviour=True (trainer.old_logprobs:
    generator): the ratio exp(logp - logp_behaviour) already holds the mismatch, so no weight multiplies it
    (that would count it twice); the mask reads the live log-probs, and `c.token` caps the unclipped branch
    at C (dual clip): loss = min(PPO-clip, C * |A|) where A < 0.
    """
    trainer_side = logp.detach() if old_is_behaviour else logp_old
    weights, keep, sums = correction_terms(trainer_side, logp_behaviour, mask, c)
    loss, clipped = policy_loss(logp, logp_old, advantages, clip_low, clip_high)
    if old_is_behaviour:
        if c.token:  # dual clip: where A < 0 the loss stops growing at C * |A| (the ratio truncated at C)
            capped = (advantages < 0) & (loss > -c.cap * advantages)
            loss = torch.where(capped, -c.cap * advantages, loss)
            clipped = torch.maximum(clipped, capped.to(clipped.dtype))  # counted in loss/clip_frac
    else:
        loss = loss * weights
    return loss * keep.unsqueeze(-1), clipped, sums


def correction_means(totals: dict[str, float | Tensor]) -> dict[str, float]:
    """`correction/*` from an update's sums: mean truncated weight, truncated share, k3 KL (per response
    token) and masked share (per step). Empty when the correction was off (no sums)."""
    total = {key: float(value) for key, value in totals.items() if key.startswith(SUM)}
    tokens, steps = total.get(SUM + "tokens", 0.0), total.get(SUM + "steps", 0.0)
    if tokens <= 0 or steps <= 0:
        return {}
    return {"correction/weight_mean": total[SUM + "weight"] / tokens,
            "correction/truncated_share": total[SUM + "truncated"] / tokens,
            "correction/kl_k3": total[SUM + "kl_k3"] / tokens,
            "correction/masked_share": total[SUM + "masked"] / steps}
