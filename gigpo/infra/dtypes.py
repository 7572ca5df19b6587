"""The one map from a recipe's dtype names to torch dtypes (vLLM takes the same canonical names)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the CLI's parser reads DTYPE_NAMES, and `gigpo config`,
    import torch   # `--help` or a refused `gigpo serve` should not wait ~2 s for torch

DTYPE_NAMES = {"bf16": "bfloat16", "fp32": "float32", "bfloat16": "bfloat16", "float32": "float32"}
"""Accepted dtype name -> canonical name: torch's attribute name, which vLLM's `dtype=` also takes."""


def canonical_dtype(name: str) -> str:
    """'bf16' -> 'bfloat16'; an unsupported name is an error listing the supported ones."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype={name!r} is not supported; use one of {', '.join(DTYPE_NAMES)}")
    return DTYPE_NAMES[name]


def torch_dtype(name: str) -> torch.dtype:
    """'bf16' -> torch.bfloat16."""
    import torch

    return getattr(torch, canonical_dtype(name))


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU has native bf16 matmul kernels (oneDNN's need AVX-512). Without them torch emulates
    bf16: on an AMD EPYC with AVX2 only, a 1024x576 by 576x1536 matmul ran at 1.2 GFLOP/s against 127 in fp32,
    and a SmolLM2-135M warm-up step took minutes instead of seconds."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without this probe: cannot tell, so do not warn
        return True
