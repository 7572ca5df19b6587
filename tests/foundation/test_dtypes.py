"""Recipe dtype names, and telling whether this CPU has native bf16 kernels."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gigpo.infra.dtypes import canonical_dtype, cpu_has_fast_bf16, torch_dtype


def test_names_map_to_torch_and_a_bad_one_lists_the_good_ones():
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("float32") is torch.float32
    with pytest.raises(ValueError, match="dtype='fp16' is not supported; use one of bf16, fp32"):
        canonical_dtype("fp16")


def test_a_cpu_without_avx512_is_told_it_emulates_bf16():
    """oneDNN's bf16 kernels need AVX-512; on an AVX2-only AMD EPYC a bf16 matmul ran 100x slower than fp32."""
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").is_file() else set()
    if not flags or any(f.startswith("avx512") for f in flags):
        pytest.skip("needs a Linux CPU without AVX-512")
    assert not cpu_has_fast_bf16()
