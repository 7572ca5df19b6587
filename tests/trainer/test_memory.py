"""Per-phase peak memory: each phase's peak is its own, and freed heap memory goes back to the kernel."""
from __future__ import annotations

import os

import pytest
import torch

from gigpo.trainer.memory import PhaseMemory, release_freed_memory, rss_gib

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc peak reset")


def _small_tensors(total_mib: int) -> list[torch.Tensor]:
    """Many tensors below glibc's mmap threshold: they come from the heap, which keeps them when freed."""
    return [torch.ones(64 * 1024 // 4) for _ in range(total_mib * 16)]  # 64 KiB each


def test_release_freed_memory_hands_heap_pages_back():
    held = _small_tensors(300)
    before_free = rss_gib()
    del held
    release_freed_memory()
    assert rss_gib() < before_free - 0.2  # ~0.29 GiB freed and returned, not kept by malloc


def test_each_phase_reports_its_own_peak():
    memory = PhaseMemory()
    memory.start()
    held = _small_tensors(300)
    memory.stop("big")
    del held
    memory.start()  # releases the big phase's pages, then resets the high-water mark
    _ = torch.ones(16)
    memory.stop("small")
    peaks = memory.metrics()
    assert peaks["perf/peak_rss_gb/big"] > peaks["perf/peak_rss_gb/small"] + 0.2
