"""Trainer fixtures: real DeepSpeed engines (one rank, ZeRO-2, fp32) on the tiny local model."""
from __future__ import annotations

import pytest
import torch

from gigpo.trainer.batching import TrainSample

SHAPES = [(10, 5), (20, 8), (7, 3), (30, 12), (5, 5), (12, 9)]


def make_samples(vocab: int = 1000, seed: int = 0, shapes=SHAPES) -> list[TrainSample]:
    g = torch.Generator().manual_seed(seed)
    return [TrainSample(torch.randint(3, vocab, (p,), generator=g).tolist(),
                        torch.randint(3, vocab, (r,), generator=g).tolist())
            for p, r in shapes]


@pytest.fixture
def samples() -> list[TrainSample]:
    return make_samples()
