"""Shared generators for the rollout tests: vLLM engines cost ~20-40 s to start, so each kind starts once."""
from __future__ import annotations

import pytest
import torch

from gigpo.rollout.types import SamplingSettings

GREEDY = SamplingSettings(temperature=0, max_new_tokens=16)


def sample_prompts(count: int = 6, seed: int = 0, vocab: int = 1000) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (int(n),), generator=gen).tolist()
            for n in torch.randint(4, 40, (count,), generator=gen)]


@pytest.fixture(scope="session")
def vllm_generator(tiny_model_dir):
    from gigpo.rollout.vllm_backend import VLLMGenerator

    gen = VLLMGenerator(str(tiny_model_dir), dtype="fp32", max_num_seqs=32, enforce_eager=True)
    yield gen
    gen.close()
