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
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.vllm_backend import VLLMGenerator

    gen = VLLMGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=True))
    yield gen
    gen.close()


def assert_submitted_like_a_batch(generator, prompts: list[list[int]], settings: SamplingSettings) -> None:
    """Prompts submitted one by one, all at once (as an async rollout does), sample what one batched call does."""
    batch = generator.generate(prompts, settings)
    streamed = submit_and_wait(generator, prompts, settings)
    assert [(c.prompt_index, c.token_ids) for c in streamed] == [(c.prompt_index, c.token_ids) for c in batch]
    assert {c.weight_version for c in streamed} == {generator.version}


def submit_and_wait(generator, prompts: list[list[int]], settings: SamplingSettings, timeout_s: float = 120.0):
    """Submit every prompt at once (prompt i seeded `seed + i`, as `generate` seeds a batch); their completions
    in prompt order, prompt_index set, once all have come back."""
    import queue
    from dataclasses import replace

    answers: "queue.Queue" = queue.Queue()
    for i, prompt in enumerate(prompts):
        seeded = settings if settings.seed is None else replace(settings, seed=settings.seed + i)
        generator.submit(prompt, seeded, lambda answer, i=i: answers.put((i, answer)))
    got = dict(answers.get(timeout=timeout_s) for _ in prompts)
    out = []
    for i in range(len(prompts)):
        if isinstance(got[i], BaseException):
            raise got[i]
        for c in got[i]:
            c.prompt_index = i
            out.append(c)
    return out
