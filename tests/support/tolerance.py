"""Float tolerances derived from the dtype's epsilon, the values' magnitude and how many terms were summed.

Why: the same computation on another CPU runs other kernels (PyTorch's default, AVX2 or AVX-512 paths, oneDNN
and MKL blockings, AMX), which add the same terms in another order and with or without fused multiply-adds.
Each order rounds differently. For a sum of n terms of size at most m, the rounding error of one order is
within lambda * sqrt(n) * eps * m with high probability (Higham and Mary, "A new approach to probabilistic
rounding error analysis", SIAM J. Sci. Comput. 2019: the bound fails with probability at most
2 * exp(-lambda^2 / 2) per term; lambda = 4 makes that 7e-4, and the errors of two orders add). The
worst case n * eps * m is reached only by adversarial data and would let real bugs through.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

LAMBDA = 4.0
"""Standard deviations of rounding noise a tolerance allows (see the module docstring)."""


def eps(dtype: Any) -> float:
    """Machine epsilon of a torch or numpy float dtype."""
    if isinstance(dtype, torch.dtype):
        return torch.finfo(dtype).eps
    return float(np.finfo(dtype).eps)


def reorder_tolerance(dtype: Any, magnitude: float, terms: int) -> float:
    """Largest expected gap between two evaluation orders of a result built from `terms` rounded operations
    on values of size at most `magnitude` (two orders: twice one order's probabilistic error bound)."""
    if terms < 1 or magnitude < 0:
        raise ValueError(f"terms={terms} must be >= 1 and magnitude={magnitude} >= 0")
    return 2 * LAMBDA * math.sqrt(terms) * eps(dtype) * magnitude


def forward_terms(config: Any, seq_len: int) -> int:
    """Rounded multiply-adds on the longest dependency chain of one decoder-only transformer forward:
    per layer the q/k/v projection (hidden), the attention scores (head dim), the softmax-weighted sum over
    `seq_len` positions, the output projection (hidden), the MLP up (hidden) and down (intermediate)
    projections; then the LM head (hidden) and the log-softmax's sum over the vocabulary."""
    hidden, head_dim = config.hidden_size, config.hidden_size // config.num_attention_heads
    per_layer = 3 * hidden + head_dim + seq_len + config.intermediate_size
    return config.num_hidden_layers * per_layer + hidden + config.vocab_size


def logprob_tolerance(config: Any, seq_len: int, dtype: torch.dtype = torch.float32, largest: float = 0.0) -> float:
    """Gap allowed between two kernels' token log-probs (or entropies) of the same model and tokens. The
    magnitude is log(vocab), what a log-prob or an entropy of a near-uniform (random or tiny) model is, or
    the `largest` |log-prob| seen when a sharper model goes beyond it."""
    return reorder_tolerance(dtype, max(math.log(config.vocab_size), largest), forward_terms(config, seq_len))


def relative_update_gap(after_a: torch.Tensor, after_b: torch.Tensor, before: torch.Tensor) -> float:
    """||update_a - update_b|| / ||update_b|| for two optimizer runs from the same `before` weights.

    Why not an elementwise bound: Adam moves each weight by lr * m / (sqrt(v) + 1e-8), which is
    ill-conditioned where the gradient is near 0 (its slope there is lr / 1e-8), so a float-noise gap in a
    near-zero gradient can move that weight by up to 2 * lr per step on one CPU and not another. Such weights
    are few; every weight with a real gradient moves by about lr per step in the same direction in both runs.
    A gradient that differs for real (a bug) changes most updates, making this ratio O(1)."""
    update_a, update_b = (after_a - before).double(), (after_b - before).double()
    norm = update_b.norm().item()
    return (update_a - update_b).norm().item() / norm if norm > 0 else (update_a.norm().item() > 0) * math.inf


def approx(expected: Any, terms: int, dtype: Any = torch.float32, magnitude: float | None = None) -> Any:
    """pytest.approx of a value computed in `dtype` through `terms` rounded operations on values of size
    `magnitude` (default: the largest |expected|, at least 1 ulp's worth of 1.0 for an expected 0)."""
    import pytest

    if magnitude is None:
        magnitude = max(float(np.max(np.abs(expected))), 1.0) if np.size(expected) else 1.0
    return pytest.approx(expected, rel=0, abs=reorder_tolerance(dtype, magnitude, terms))


def samples_close(config: Any, samples: list) -> dict[str, float]:
    """assert_close bounds for the per-token log-probs or entropies of training `samples` (TrainSample)."""
    longest = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    return dict(atol=logprob_tolerance(config, longest), rtol=0)


def metric_rel(config: Any, samples: list) -> float:
    """Relative gap allowed for a loss or a grad norm over `samples`: the forward chain, the backward chain
    (as long again) and the sum over every token of the batch, on values of size 1 relative to the result."""
    longest = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    tokens = sum(len(s.response_ids) for s in samples)
    return reorder_tolerance(torch.float32, 1.0, 2 * forward_terms(config, longest) + tokens)


STD_FLOOR = 1e-6
"""gigpo's advantage normalisers divide by std + 1e-6 (gigpo.advantage.estimators)."""


def normalised_tolerance(magnitude: float, terms: int) -> float:
    """Gap allowed in float64 advantages: a reorder gap of a group mean or std over `terms` rewards or returns
    of size `magnitude`, divided by std + 1e-6, which a tie (std 0) makes as small as 1e-6."""
    return reorder_tolerance(np.float64, magnitude, terms) / STD_FLOOR
