"""bf16 training on a CPU without native bf16 kernels: the matmuls run in fp32 kernels, bf16 in and bf16 out.

Torch's bf16 matmuls need oneDNN's AVX-512 kernels; on an AVX2-only CPU `mm` falls back to a generic loop:
a 1024x576 by 576x1536 matmul took 1.45 s against 0.012 s in fp32 (AMD EPYC, 2 threads), and one SmolLM2-135M
warm-up step 239 s against 7.4 s. Widening the bf16 operands to fp32 (exact), multiplying in the fp32 kernel
and rounding the product back to bf16 is the arithmetic of a native bf16 kernel (bf16 operands, fp32
accumulation, a bf16 result) in another summation order: 0.011 s for that matmul, 0.015% of its elements one
bf16 step apart from torch's, and 8.3 s for that warm-up step (docs/benchmarks.md). Attention's fused CPU
kernel is widened the same way and keeps its softmax in fp32. Nothing changes on a CPU with native bf16 or on
a GPU. vLLM's CPU kernels are its own, outside torch's dispatch, and are not widened.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from gigpo.infra.dtypes import canonical_dtype, cpu_has_fast_bf16

_aten = torch.ops.aten
_FLASH_FORWARD = _aten._scaled_dot_product_flash_attention_for_cpu.default
WIDENED_OPS = frozenset({
    _aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default, _FLASH_FORWARD,
    _aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    _aten.linear.default, _aten.matmul.default, _aten.scaled_dot_product_attention.default,
})
"""The ops that take bf16 operands and run in fp32 kernels: what the forward and backward of a transformer
spend their time in. With autograd on, linear and matmul reach this mode decomposed into mm/addmm/bmm and
attention as its fused kernel; under torch.inference_mode (generation) they arrive whole."""

_FP32_OUTPUTS = {_FLASH_FORWARD: {1}}
"""Outputs an op returns in fp32 even for bf16 operands (flash attention's logsumexp): they stay fp32."""


def _is_cpu_bf16(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 and x.device.type == "cpu"


def _widen(x: Any) -> Any:
    return x.float() if _is_cpu_bf16(x) else x


class Bf16MatmulsInFp32(TorchDispatchMode):
    """While active, each op of WIDENED_OPS with a CPU bf16 operand runs on fp32 copies of its operands and
    returns its results rounded to bf16; every other op, and these ops without bf16 operands, run as they are.
    Active on the thread that enters it, backward passes started there included."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in WIDENED_OPS or not any(_is_cpu_bf16(a) for a in (*args, *kwargs.values())):
            return func(*args, **kwargs)
        out = func(*tree_map(_widen, args), **tree_map(_widen, kwargs))
        keep = _FP32_OUTPUTS.get(func, set())
        if isinstance(out, tuple):
            return tuple(o if i in keep else o.to(torch.bfloat16) for i, o in enumerate(out))
        return out.to(torch.bfloat16)


def needs_widened_bf16(dtype: str, on_cuda: bool, fast_bf16: bool) -> bool:
    """Whether a model computing in `dtype` should run its matmuls widened: bf16 on a CPU without native bf16."""
    return not on_cuda and not fast_bf16 and canonical_dtype(dtype) == "bfloat16"


VLLM_BACKENDS = ("vllm", "vllm-server")


def cpu_bf16_notice(dtype: str, on_cuda: bool, fast_bf16: bool, backend: str) -> str | None:
    """What a run in `dtype` on this machine should say at its start (None where there is nothing to say): on a CPU
    without native bf16, that the trainer widens bf16 matmuls, and, with a vLLM backend, that vLLM's own bf16
    kernels are not widened and generate several times slower than fp32 (6.6x for SmolLM2-135M here)."""
    if not needs_widened_bf16(dtype, on_cuda, fast_bf16):
        return None
    notice = (f"model.dtype={dtype} on a CPU without native bf16 kernels (no AVX-512): the trainer runs bf16 "
              "matmuls in fp32 kernels, bf16 in and out (gigpo/infra/cpu_bf16.py)")
    if backend in VLLM_BACKENDS:
        notice += (f"; rollout.backend={backend} generates with vLLM's own bf16 kernels, which this CPU emulates: "
                   "6.6x slower than fp32 for SmolLM2-135M, and its engine starts 2x slower; set model.dtype=fp32, "
                   "or rollout.backend=hf (widened too)")
    return notice


def matmul_path(dtype: str) -> str:
    """'widened' where bf16_matmuls(dtype) widens on this machine, else 'native': part of what a cached result
    computed in `dtype` depends on (a warm-up built widened is not bit-identical to one built natively)."""
    return "widened" if _widen_here(dtype) else "native"


@contextlib.contextmanager
def bf16_matmuls(dtype: str) -> Iterator[None]:
    """The context for a model's forward and backward in `dtype` (model.dtype) on this machine: bf16 matmuls
    widened to fp32 kernels where the CPU has no native bf16 (Bf16MatmulsInFp32), otherwise nothing."""
    if _widen_here(dtype):
        with Bf16MatmulsInFp32():
            yield
    else:
        yield


@functools.lru_cache(maxsize=None)
def _widen_here(dtype: str) -> bool:
    """needs_widened_bf16 for this process's machine, asked once (it runs around every forward)."""
    return needs_widened_bf16(dtype, torch.cuda.is_available(), cpu_has_fast_bf16())
