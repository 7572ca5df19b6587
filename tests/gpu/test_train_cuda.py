"""`gigpo train` on CUDA, each run one iteration of the shrunk Sokoban recipe the CPU trainer tests use:
vLLM generation with the sync verified by the probe; ZeRO 0, 2 and 3 with the shared layout in bf16
(its attention mask once gave NaN log-probs on a GPU, docs/gpu.md)."""
from __future__ import annotations

import math

import pytest

from gpu_marks import requires_cuda
from support.run import metrics_of, train

pytestmark = requires_cuda


def _trained_row(run_dir):
    rows = [r for r in metrics_of(run_dir) if "time/iteration" in r]
    assert rows, "no training iteration was logged"
    row = rows[-1]
    for key in ("loss/entropy", "actor/grad_norm"):
        assert math.isfinite(row[key]), (key, row[key])
    assert any(k.startswith("perf/peak_gpu_gb/") and v > 0 for k, v in row.items()), "nothing ran on the GPU"
    return row


def test_one_iteration_with_vllm_and_verified_sync(tmp_path):
    """Colocated: CUDA graphs on (no enforce_eager), vLLM asleep during the update, the sync into the
    captured graphs verified."""
    import torch

    train(tmp_path / "run", "trainer.iterations=1", "rollout.backend=vllm", "rollout.verify_sync=true",
          "rollout.sleep_level=1", "rollout.gpu_memory_utilization=0.3", "model.dtype=bf16")
    row = _trained_row(tmp_path / "run")
    assert 0 <= row["rollout/sync_gap_max"] < 0.5  # bf16 bound (docs/generation.md, "Sync verification")
    share = 0.3 * torch.cuda.mem_get_info()[1] / 2**30
    freed = row["perf/gpu_free_gb/update"] - row["perf/gpu_free_gb/generation"]
    assert freed > 0.5 * share, f"vLLM's sleep freed {freed:.1f} GiB of its {share:.1f} GiB share"


@pytest.mark.parametrize("zero", [0, 2, 3])
def test_zero_stage_trains_with_the_shared_layout_in_bf16(tmp_path, zero):
    train(tmp_path / "run", "trainer.iterations=1", "rollout.backend=hf", f"trainer.zero_stage={zero}",
          "trainer.layout=shared", "model.dtype=bf16")
    _trained_row(tmp_path / "run")
