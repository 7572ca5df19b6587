"""Sync verification: after a weight sync the generator must score a probe like the trainer does.

A silent sync bug (stale prefix cache, a tied LM head left at old weights) trains on the wrong
policy without any error. The probe is a fixed prompt longer than a few KV blocks, so it sits in
the prefix cache between syncs; after each sync the generator continues it greedily and the
trainer model scores the same tokens. A largest gap beyond `atol`, or a mean gap beyond `mean_atol`,
is an error naming the largest difference.

In fp32 both bounds are tight (2e-3), so any stale tensor shows. In bf16 the generator's kernels round
differently from the trainer's, and on the probe's random tokens single log-probs differ by up to ~0.27
with correct weights (measured with SmolLM2, docs/generation.md): the bf16 bounds only catch gross
faults (an untied or stale LM head, a stale prefix cache after real updates).

fp32 on a GPU is not CPU's fp32: vLLM's Triton attention multiplies fp32 inputs in TF32 (10-bit mantissa), and
on an H200 a correct sync left gaps of up to 0.0064 (mean 0.0021) on the tests' tiny model, over the 2e-3 measured
on CPUs (docs/gpu.md, 2026-11-28). There the fp32 bounds are bf16's scaled by TF32's precision against bf16's
(2^-10 / 2^-7): still 8x tighter than bf16's, and still far below the gaps a stale tensor leaves.
"""
from __future__ import annotations

from typing import Optional

import torch

from gigpo.infra.cpu_bf16 import bf16_matmuls
from gigpo.rollout.generator import Generator
from gigpo.rollout.types import Completion, SamplingSettings

PROBE_PROMPT_TOKENS = 384
"""Three of vLLM-CPU's 128-token KV blocks, so the probe's KV is reused from the prefix cache."""
PROBE_NEW_TOKENS = 16
DEFAULT_TOLERANCE = {torch.float32: (2e-3, 2e-3), torch.bfloat16: (0.5, 0.1)}
"""(largest, mean) log-prob gap accepted over the probe's tokens, by model dtype, on CPUs."""
GPU_FP32_TOLERANCE = tuple(bound * 2**-10 / 2**-7 for bound in DEFAULT_TOLERANCE[torch.bfloat16])
"""fp32 on CUDA, where vLLM's attention runs in TF32: bf16's bounds times TF32's epsilon over bf16's."""


class SyncMismatchError(RuntimeError):
    """The generator's weights do not match the trainer's after a sync."""


def probe_prompt(vocab_size: int, length: int = PROBE_PROMPT_TOKENS, seed: int = 20261122) -> list[int]:
    """A fixed pseudo-random prompt (same on every machine for a given vocab size)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (length,), generator=gen).tolist()


@torch.inference_mode()
def trainer_logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """log p(tokens[t] | prompt, tokens[:t]) under `model` (an HF causal LM or a wrapper of one)."""
    ids = torch.tensor([prompt + tokens])
    weight = next(model.parameters())
    device = weight.device
    with bf16_matmuls("bf16" if weight.dtype == torch.bfloat16 else "fp32"):
        logits = model(input_ids=ids.to(device)).logits[0, len(prompt) - 1:-1].float()  # (T, V)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens, device=device)[:, None]).squeeze(-1).cpu()


class SyncVerifier:
    """Checks a generator against the trainer model; build it before the first sync.

    `forwards`: under ZeRO-3 with several ranks the trainer model's forward is collective (each layer's
    weights are gathered from every rank), so every rank must run the same number of probe forwards: a rank
    scoring fewer replicas than `forwards` runs the rest on the probe alone (see `ProbeFollower`).
    """

    def __init__(self, generator: Generator, vocab_size: int, atol: float, mean_atol: Optional[float] = None,
                 forwards: Optional[int] = None) -> None:
        self.generator = generator
        self.atol = atol
        self.mean_atol = atol if mean_atol is None else mean_atol
        self.probe = probe_prompt(vocab_size)
        self.forwards = forwards
        self._continue_probe()  # puts the probe's KV in the prefix cache, so a skipped reset shows

    def _continue_probe(self):
        """One probe per replica: a multi-server generator sends one copy to each server."""
        copies = [self.probe] * self.generator.num_replicas
        return self.generator.generate(copies, SamplingSettings(temperature=0, max_new_tokens=PROBE_NEW_TOKENS))

    def gaps(self, model: torch.nn.Module) -> list[tuple[Completion, torch.Tensor, torch.Tensor]]:
        """Per replica: (completion, generator log-probs, trainer log-probs) of the probe continuation."""
        out = []
        for completion in self._continue_probe():
            ref = trainer_logprobs(model, self.probe, completion.token_ids)
            out.append((completion, torch.tensor(completion.logprobs), ref))
        return out

    def check(self, model: torch.nn.Module) -> float:
        """Largest |generator - trainer| log-prob over the probe continuation; raises beyond the bounds."""
        largest = 0.0
        scored = self.gaps(model)
        follow_forwards(model, self.probe, (self.forwards or len(scored)) - len(scored))  # before any raise
        for replica, (completion, got, ref) in enumerate(scored):
            gap = (got - ref).abs()
            worst = int(gap.argmax())
            if gap[worst] > self.atol or gap.mean() > self.mean_atol:
                raise SyncMismatchError(
                    f"weight sync to version {completion.weight_version} failed verification on replica {replica}: "
                    f"largest log-prob difference {gap[worst]:.4f} (atol={self.atol}), mean {gap.mean():.4f} "
                    f"(mean_atol={self.mean_atol}), largest at probe continuation token "
                    f"{worst} (id {completion.token_ids[worst]}): generator {got[worst]:.4f}, trainer "
                    f"{ref[worst]:.4f}. The generator is not sampling from the trainer's policy (stale prefix "
                    "cache or LM head? on a GPU, CUDA graphs holding old weights: try rollout.enforce_eager=true). "
                    "rollout.verify_sync stops training here; rollout.verify_sync=false trains without the check")
            largest = max(largest, float(gap[worst]))
        return largest


class ProbeFollower:
    """A rank without a generator under ZeRO-3: it runs the probe forwards the checking ranks run, so their
    collective weight gathers complete; it checks nothing itself."""

    def __init__(self, vocab_size: int, forwards: int) -> None:
        self.probe = probe_prompt(vocab_size)
        self.forwards = forwards

    def check(self, model: torch.nn.Module) -> None:
        follow_forwards(model, self.probe, self.forwards)
        return None


def follow_forwards(model: torch.nn.Module, probe: list[int], count: int) -> None:
    """`count` forwards of `model` on the probe (ZeRO-3: each one gathers every layer with the other ranks)."""
    for _ in range(max(0, count)):
        trainer_logprobs(model, probe[:-1], probe[-1:])


def default_tolerance(dtype: str, on_gpu: Optional[bool] = None) -> tuple[float, float]:
    """(atol, mean_atol) for a recipe's `model.dtype`; `on_gpu` (default: this machine has CUDA) selects the
    TF32-level fp32 bounds, since generators there run on the GPU."""
    from gigpo.infra.dtypes import torch_dtype

    dtype = torch_dtype(dtype)
    if dtype == torch.float32 and (torch.cuda.is_available() if on_gpu is None else on_gpu):
        return GPU_FP32_TOLERANCE
    return DEFAULT_TOLERANCE[dtype]
