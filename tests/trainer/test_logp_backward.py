"""The log-prob backward of a micro-batch: memory that does not grow with its chunk count, and the gradient of
the plain (unchunked) log-softmax, through a real model (tied embeddings, bf16, LoRA)."""
from __future__ import annotations

import pytest
import torch

from gigpo.trainer import lora
from gigpo.trainer.engines import ReferenceModel
from gigpo.trainer.losses import entropy_from_logits
from support.dispatch import NewTensorsOfShape
from support.tolerance import LAMBDA, eps, reorder_tolerance
from trainer_helpers import engine_settings, make_samples

# 3 samples, 240 response tokens: 15 chunks of 16 kept positions (4 of 64), and more kept positions than the
# tiny model's hidden size (128), so an (M, V) tensor is not mistaken for a (V, hidden) weight gradient
SHAPES = [(10, 100), (6, 80), (12, 60)]
LORA = lora.LoraSettings(rank=4, alpha=8.0, dropout=0.0, target_modules=("all-linear",))


def _policy(model_dir, dtype: str, with_lora: bool) -> ReferenceModel:
    """A plain-module policy forward (no DeepSpeed, no optimizer) whose parameters take gradients."""
    policy = ReferenceModel(str(model_dir), engine_settings(dtype=dtype, zero_stage=0, temperature=0.8))
    policy.module.requires_grad_(True)
    if with_lora:
        policy.module = lora.wrap(policy.module, LORA)
    return policy


def _plain_logp_entropy(policy, mb):
    """The unchunked form: one fp32 log-softmax over every kept row, gathered per target."""
    x = policy._call(mb).float()[mb.kept_index] / policy.settings.temperature  # (n, Rmax, V)
    logp = torch.log_softmax(x, -1).gather(-1, mb.kept_targets[..., None])[..., 0]
    return logp, entropy_from_logits(x)


def _loss(logp, entropy, mb, weights):
    return ((logp * weights[0] + entropy * weights[1]) * mb.mask).sum()


@pytest.mark.parametrize("dtype,with_lora", [("fp32", False), ("bf16", False), ("bf16", True)])
def test_logp_backward_allocates_at_most_two_full_size_tensors_whatever_the_chunks(tiny_model_dir, dtype,
                                                                                    with_lora):
    policy = _policy(tiny_model_dir, dtype, with_lora)
    samples = make_samples(shapes=SHAPES)
    mb = policy._collate(samples, list(range(len(samples))), False)
    vocab, rows = policy.module.config.vocab_size, mb.kept_used.shape[0]
    weights = torch.randn((2, *mb.mask.shape), generator=torch.Generator().manual_seed(0))
    full = {}
    for chunk_rows in (16, 64):
        policy.logit_chunk_rows = chunk_rows
        loss = _loss(*policy._logp_entropy(mb, with_entropy=True), mb, weights)
        # the backward as on a GPU (no CPU bf16 widening): every new vocabulary-wide tensor it makes
        with NewTensorsOfShape(last=vocab, numel=1) as spy:
            loss.backward()
        full[chunk_rows] = [c for c in spy.created if c[1][0] * c[1][-1] >= rows * vocab]
        # everything else is one chunk's fp32 temporaries, whatever the micro-batch's size
        assert all(c[1][0] <= chunk_rows for c in spy.created if c not in full[chunk_rows]), spy.created
    assert rows > 128 and rows // 16 >= 10
    assert len(full[16]) <= 2, full[16]
    assert len(full[16]) == len(full[64]), full


@pytest.mark.parametrize("dtype,with_lora", [("fp32", False), ("bf16", False), ("bf16", True)])
def test_chunked_logp_gives_the_values_and_gradients_of_the_plain_log_softmax(tiny_model_dir, dtype, with_lora):
    policy = _policy(tiny_model_dir, dtype, with_lora)
    policy.logit_chunk_rows = 16
    samples = make_samples(shapes=SHAPES)
    mb = policy._collate(samples, list(range(len(samples))), False)
    weights = torch.randn((2, *mb.mask.shape), generator=torch.Generator().manual_seed(0))
    params = [p for p in policy.module.parameters() if p.requires_grad]

    def run(fn):
        for p in params:
            p.grad = None
        logp, entropy = fn()
        _loss(logp, entropy, mb, weights).backward()
        return logp.detach(), entropy.detach(), torch.cat([p.grad.float().reshape(-1) for p in params])

    chunked = run(lambda: policy._logp_entropy(mb, with_entropy=True))
    plain = run(lambda: _plain_logp_entropy(policy, mb))
    vocab = policy.module.config.vocab_size
    # both sides compute in fp32 from the same logits: entropies sum `vocab` terms of size <= max|x|
    x_max = policy._call(mb).detach().float().abs().max().item() / policy.settings.temperature
    tol = reorder_tolerance(torch.float32, x_max, vocab)
    mask = mb.mask.bool()
    torch.testing.assert_close(chunked[0][mask], plain[0][mask], atol=tol, rtol=0)
    torch.testing.assert_close(chunked[1][mask], plain[1][mask], atol=tol, rtol=0)
    # the logits' gradient is rounded to the model's dtype once on each side (one ulp apart at most), and the
    # model's backward then runs the same ops on both: the parameter gradients' gap, as a share of their norm,
    # is that rounding's, on top of fp32 noise over the vocabulary
    gap = (chunked[2] - plain[2]).norm() / plain[2].norm()
    assert plain[2].norm() > 0
    assert gap <= LAMBDA * 2 * eps(policy.module.dtype) + reorder_tolerance(torch.float32, 1.0, vocab), gap
