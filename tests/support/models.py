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
