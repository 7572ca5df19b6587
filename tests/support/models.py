"""A trainer-side copy of a model for the generation tests, and a stand-in for an optimiser step."""
from __future__ import annotations

from pathlib import Path

import torch


def load_trainer_model(model_dir: Path) -> torch.nn.Module:
    """A fresh fp32 HF copy of the model, standing in for the trainer's."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@torch.no_grad()
def perturb(model: torch.nn.Module, seed: int, scale: float = 0.05) -> None:
    """Move every parameter (the tied embedding/LM head included), as an optimiser step would."""
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.add_(torch.randn(p.shape, generator=gen) * scale)


@torch.no_grad()
def mean_answer_logprob(model_dir: Path, pairs: list[tuple[list[int], list[int]]]) -> float:
    """Mean log-probability per answer token of (prompt, answer) pairs under the model: how well a warm-up
    learned its demonstrations."""
    model = load_trainer_model(model_dir)
    total, count = 0.0, 0
    for prompt, response in pairs:
        ids = torch.tensor([prompt + response])
        logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
        picked = logp.gather(-1, ids[0, 1:, None])[:, 0][len(prompt) - 1:]
        total += float(picked.sum())
        count += len(response)
    return total / count
