"""The sync verifier's default bounds by dtype and machine: fp32 on a GPU gets TF32-level bounds, because vLLM's
fp32 attention runs in TF32 there, and correct syncs on an H200 gapped more than CPU's fp32 bound allows."""
from __future__ import annotations

import torch

from gigpo.rollout.weight_sync.verify import default_tolerance

H200_CORRECT_SYNC_GAPS = [(0.0032, 0.0013), (0.0064, 0.0021)]
"""(largest, mean) log-prob gaps of correct fp32 syncs on the H200, 2026-11-28 (docs/gpu.md)."""


def test_fp32_on_a_gpu_accepts_what_correct_syncs_measured_there_and_stays_tighter_than_bf16() -> None:
    gpu, cpu, bf16 = default_tolerance("fp32", on_gpu=True), default_tolerance("fp32", on_gpu=False), \
        default_tolerance("bf16", on_gpu=True)
    for largest, mean in H200_CORRECT_SYNC_GAPS:
        assert largest <= gpu[0] and mean <= gpu[1]
        assert largest > cpu[0]  # why the CPU bound could not stay: it called these correct syncs broken
    assert gpu[0] < bf16[0] and gpu[1] < bf16[1]


def test_only_fp32_depends_on_the_machine() -> None:
    assert default_tolerance("bf16", on_gpu=True) == default_tolerance("bf16", on_gpu=False)
    assert default_tolerance("fp32") == default_tolerance("fp32", on_gpu=torch.cuda.is_available())
