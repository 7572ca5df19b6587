"""Shared by the trainer tests and the 2-rank worker: samples and settings built from recipe defaults."""
from __future__ import annotations

import dataclasses

import torch

from gigpo.config import build_config
from gigpo.trainer.batching import TrainSample

# the recipe defaults, with fp32 so log-probs can be compared exactly with a plain HF forward
_DEFAULTS = build_config({"model": {"init": "tiny", "dtype": "fp32"}})


def engine_settings(**overrides):
    """TrainingEngineSettings from the recipe defaults (gigpo.config), with test-sized overrides."""
    from gigpo.trainer.engines import settings_from_config

    if overrides.get("mini_batch_size") is not None:  # as in a recipe: a size given switches the count off
        overrides.setdefault("mini_batches", None)
    return dataclasses.replace(settings_from_config(_DEFAULTS)[0], **overrides)


def loss_settings(**overrides):
    from gigpo.trainer.engines import settings_from_config

    return dataclasses.replace(settings_from_config(_DEFAULTS)[1], **overrides)

SHAPES = [(10, 5), (20, 8), (7, 3), (30, 12), (5, 5), (12, 9)]


def make_samples(vocab: int = 1000, seed: int = 0, shapes=SHAPES) -> list[TrainSample]:
    g = torch.Generator().manual_seed(seed)
    return [TrainSample(torch.randint(3, vocab, (p,), generator=g).tolist(),
                        torch.randint(3, vocab, (r,), generator=g).tolist())
            for p, r in shapes]


def with_repeated_prompts(samples: list[TrainSample], copies: int = 2, seed: int = 1) -> list[TrainSample]:
    """`samples` plus `copies` new responses to each of their prompts (as a group's shared states give)."""
    g = torch.Generator().manual_seed(seed)
    extra = [TrainSample(list(s.prompt_ids), torch.randint(3, 1000, (1 + (3 * k + len(s.prompt_ids)) % 7,),
                                                           generator=g).tolist())
             for s in samples for k in range(copies)]
    return samples + extra
