"""Greedy answers of two backends compared through log-probs, so a near-tie cannot fail a test on another CPU.

Two fp32 backends (HF, vLLM, a vLLM server) compute one token's log-prob with different kernels; they
agree within the sync verifier's fp32 bound (`verify.DEFAULT_TOLERANCE`, 2e-3, measured in
docs/generation.md). Where the reference's two best tokens are closer than that, the argmax may flip on
another CPU (AVX2, AVX-512 and AMX paths round differently) without anything being wrong. So two greedy
answers must be equal, or first differ at a token where the reference scores both choices within twice
that bound of each other (each backend may be off by the bound, in opposite directions); a broken sync
or wrong weights make them differ where the margin is large, and fail. On a GPU the bound is the TF32-level
one (`verify.default_tolerance`): vLLM's fp32 attention runs in TF32 there.
"""
from __future__ import annotations

import torch

from gigpo.rollout.weight_sync.verify import default_tolerance

FP32_TOLERANCE = default_tolerance("fp32")
"""(largest, mean) fp32 log-prob gap between two correct backends on this machine (CPU or GPU)."""
NEAR_TIE = 2 * FP32_TOLERANCE[0]


@torch.no_grad()
def assert_greedy_matches(reference: torch.nn.Module, prompts: list[list[int]], got: list[list[int]],
                          expected: list[list[int]], near_tie: float = NEAR_TIE) -> None:
    """`got` (another backend's greedy token ids) equals `expected` (the reference model's own greedy ids)
    for every prompt, or first departs from it at a near-tie of the reference's log-probs."""
    assert len(got) == len(expected) == len(prompts)
    device = next(reference.parameters()).device
    for i, (prompt, a, b) in enumerate(zip(prompts, got, expected)):
        if a == b:
            continue
        k = next((t for t, (x, y) in enumerate(zip(a, b)) if x != y), None)
        assert k is not None, f"prompt {i}: one answer is a prefix of the other ({len(a)} against {len(b)} tokens)"
        logits = reference(torch.tensor([prompt + b[:k]], device=device)).logits[0, -1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        margin = abs(float(logp[a[k]] - logp[b[k]]))
        assert margin <= near_tie, (f"prompt {i}: greedy answers part at token {k} ({a[k]} against {b[k]}), where "
                                    f"the reference's log-probs differ by {margin:.2e}: no near-tie (<= {near_tie:.0e})")


def tokens(completions) -> list[list[int]]:
    return [c.token_ids for c in completions]
