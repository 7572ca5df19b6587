"""bf16 matmuls widened to fp32 kernels (gigpo.infra.cpu_bf16): which kernels see fp32, and what comes back."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gigpo.infra.cpu_bf16 import WIDENED_OPS, Bf16MatmulsInFp32, bf16_matmuls, cpu_bf16_notice, needs_widened_bf16
from gigpo.infra.dtypes import cpu_has_fast_bf16
from support.dispatch import OperandDtypes

BF16_EPS = torch.finfo(torch.bfloat16).eps


def bf16(*shape: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=generator).to(torch.bfloat16)


def test_matmul_ops_receive_fp32_operands_and_return_the_rounded_fp32_product():
    g = torch.Generator().manual_seed(0)
    a, b, c = bf16(4, 64, 32, generator=g), bf16(4, 32, 16, generator=g), bf16(16, generator=g)
    cases = [(torch.mm, (a[0], b[0])), (torch.bmm, (a, b)), (torch.addmm, (c, a[0], b[0])),
             (torch.baddbmm, (c.expand(4, 64, 16), a, b))]
    for op, operands in cases:
        spy = OperandDtypes()
        with spy, Bf16MatmulsInFp32():
            out = op(*operands)
        assert spy.widened_calls() == [{torch.float32}], (op, spy.calls)
        assert out.dtype == torch.bfloat16
        expected = op(*(x.float() for x in operands)).to(torch.bfloat16)
        assert torch.equal(out, expected), op


def test_linear_backward_runs_widened_and_matches_fp32_gradients_to_bf16_precision():
    g = torch.Generator().manual_seed(1)
    x = bf16(8, 64, generator=g).requires_grad_()
    w = (bf16(32, 64, generator=g) * 0.1).requires_grad_()
    spy = OperandDtypes()
    with spy, Bf16MatmulsInFp32():
        y = F.linear(x, w)
        y.float().square().sum().backward()
    kernel_dtypes = spy.widened_calls()
    assert len(kernel_dtypes) >= 3 and all(d == {torch.float32} for d in kernel_dtypes)  # forward + 2 grads
    assert x.grad.dtype == w.grad.dtype == torch.bfloat16
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    F.linear(xf, wf).to(torch.bfloat16).float().square().sum().backward()
    for got, want in ((x.grad, xf.grad), (w.grad, wf.grad)):
        scale = want.abs().max().item()
        torch.testing.assert_close(got.float(), want, rtol=0, atol=8 * BF16_EPS * scale)


def test_fused_attention_forward_and_backward_are_widened_with_an_additive_bf16_mask():
    g = torch.Generator().manual_seed(2)
    q, k, v = (bf16(2, 3, 10, 16, generator=g).requires_grad_() for _ in range(3))
    allowed = torch.ones(10, 10, dtype=torch.bool).tril()
    mask = torch.zeros(10, 10, dtype=torch.bfloat16).masked_fill_(~allowed, torch.finfo(torch.bfloat16).min)
    spy = OperandDtypes()
    with spy, Bf16MatmulsInFp32():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and q.grad.dtype == torch.bfloat16
    fused = [d for f, d in spy.calls if f in WIDENED_OPS and "attention" in str(f)]
    assert fused and all(d == {torch.float32} for d in fused), spy.calls
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    want = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask.float())
    want.sum().backward()
    torch.testing.assert_close(out.float(), want, rtol=0, atol=4 * BF16_EPS * want.abs().max().item())
    torch.testing.assert_close(q.grad.float(), qf.grad, rtol=0, atol=8 * BF16_EPS * qf.grad.abs().max().item())


def test_ops_without_bf16_operands_pass_through_unchanged():
    a, b = torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64)
    spy = OperandDtypes()
    with spy, Bf16MatmulsInFp32():
        out = a @ b
    assert out.dtype == torch.float64 and torch.equal(out, a @ b)
    assert spy.widened_calls() == [{torch.float64}]


def test_widening_is_only_for_bf16_on_a_cpu_without_native_bf16():
    assert needs_widened_bf16("bf16", on_cuda=False, fast_bf16=False)
    assert needs_widened_bf16("bfloat16", on_cuda=False, fast_bf16=False)
    assert not needs_widened_bf16("bf16", on_cuda=False, fast_bf16=True)   # AVX-512: native kernels
    assert not needs_widened_bf16("bf16", on_cuda=True, fast_bf16=False)   # the GPU computes bf16 itself
    assert not needs_widened_bf16("fp32", on_cuda=False, fast_bf16=False)


def test_the_start_notice_names_the_widening_and_for_vllm_the_fix():
    hf = cpu_bf16_notice("bf16", on_cuda=False, fast_bf16=False, backend="hf")
    assert "model.dtype=bf16" in hf and "fp32 kernels" in hf and "vLLM" not in hf
    for backend in ("vllm", "vllm-server"):  # vLLM's kernels are its own: still emulated, so name the ways out
        notice = cpu_bf16_notice("bf16", on_cuda=False, fast_bf16=False, backend=backend)
        assert f"rollout.backend={backend}" in notice and "set model.dtype=fp32, or rollout.backend=hf" in notice
    assert cpu_bf16_notice("bf16", on_cuda=False, fast_bf16=True, backend="vllm") is None
    assert cpu_bf16_notice("bf16", on_cuda=True, fast_bf16=False, backend="vllm") is None
    assert cpu_bf16_notice("fp32", on_cuda=False, fast_bf16=False, backend="vllm") is None


def test_bf16_matmuls_widens_exactly_on_this_machine_when_it_lacks_native_bf16():
    a, b = torch.randn(16, 32).to(torch.bfloat16), torch.randn(32, 8).to(torch.bfloat16)
    spy = OperandDtypes()
    with spy, bf16_matmuls("bf16"):
        a @ b
    native = torch.cuda.is_available() or cpu_has_fast_bf16()
    assert spy.widened_calls() == [{torch.bfloat16 if native else torch.float32}]
    spy = OperandDtypes()
    with spy, bf16_matmuls("fp32"):
        a @ b
    assert spy.widened_calls() == [{torch.bfloat16}]


def test_fused_attention_returns_the_dtypes_of_the_native_bf16_kernel():
    g = torch.Generator().manual_seed(3)
    q, k, v = (bf16(1, 2, 6, 8, generator=g) for _ in range(3))
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    native = flash(q, k, v)
    with Bf16MatmulsInFp32():
        widened = flash(q, k, v)
    assert [t.dtype for t in widened] == [t.dtype for t in native]  # output bf16, logsumexp fp32
    torch.testing.assert_close(widened[1], native[1], rtol=0, atol=64 * BF16_EPS * native[1].abs().max().item())


def test_inference_mode_linear_matmul_and_attention_are_widened_whole():
    """Under torch.inference_mode (generation) linear, matmul and attention reach the mode undecomposed."""
    g = torch.Generator().manual_seed(4)
    x, w, q = bf16(6, 32, generator=g), bf16(16, 32, generator=g), bf16(1, 2, 6, 8, generator=g)
    cases = [(F.linear, (x, w)), (torch.matmul, (x, w.t())), (F.scaled_dot_product_attention, (q, q, q))]
    for op, operands in cases:
        spy = OperandDtypes()
        with torch.inference_mode(), spy, Bf16MatmulsInFp32():
            out = op(*operands)
        assert spy.widened_calls() and all(d == {torch.float32} for d in spy.widened_calls()), (op, spy.calls)
        assert out.dtype == torch.bfloat16
        with torch.inference_mode():
            assert torch.equal(out, op(*(t.float() for t in operands)).to(torch.bfloat16)), op
