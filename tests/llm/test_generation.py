"""The real model in every backend: transformers and vLLM agree greedily, before and after a weight sync."""
from __future__ import annotations

from contextlib import nullcontext

import pytest

from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.types import SamplingSettings
from gigpo.rollout.weight_sync import sync_weights
from gigpo.rollout.weight_sync.verify import SyncVerifier
from support.greedy import assert_greedy_matches, tokens
from support.models import load_trainer_model, perturb
from support.run import servers_start_with_engine_core_in_process

from .conftest import ENGINE

GREEDY = SamplingSettings(temperature=0, max_new_tokens=12)
PERTURB = 0.02
"""Enough to change greedy answers of this model, which stays a language model after it."""


@pytest.fixture(scope="module")
def hf(smollm2_dir):
    return HFGenerator(str(smollm2_dir), dtype="fp32")


@pytest.fixture(scope="module")
def trainer_model(smollm2_dir):
    return load_trainer_model(smollm2_dir)


def _sync_check(generator, hf, model, prompts, seed):
    """Perturb the trainer's model, sync it, and require the generator to answer as HF does (up to near-ties)."""
    perturb(model, seed=seed, scale=PERTURB)
    version = max(generator.version, hf.version) + 1
    hf.update_weights(model.named_parameters(), version)
    expected = [c.token_ids for c in hf.generate(prompts, GREEDY)]
    assert [c.token_ids for c in generator.generate(prompts, GREEDY)] != expected, "perturbation changed nothing"
    gap = sync_weights(generator, model, version, SyncVerifier(generator, model.config.vocab_size, atol=2e-3))
    assert gap < 2e-3
    synced = generator.generate(prompts, GREEDY)
    assert_greedy_matches(hf.model, prompts, tokens(synced), expected)
    assert {c.weight_version for c in synced} == {version}


@pytest.mark.parametrize("backend", ["vllm", "vllm-server"])
def test_greedy_equals_transformers_before_and_after_a_sync(backend, smollm2_dir, hf, trainer_model, chat_prompts,
                                                            smollm2_tokenizer, tmp_path):
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.factory import make_generator

    extra = {"server_token": "llm-test"} if backend == "vllm-server" else {}
    # the server's engine core in the server's process (its HTTP path is the subject); never in this one
    with servers_start_with_engine_core_in_process() if backend == "vllm-server" else nullcontext():
        generator = make_generator(backend, str(smollm2_dir), EngineSettings(**ENGINE), **extra)
    try:
        if generator.version == hf.version == 0:  # both hold the weights from the directory
            expected = hf.generate(chat_prompts, GREEDY)
            got = generator.generate(chat_prompts, GREEDY)
            assert_greedy_matches(hf.model, chat_prompts, tokens(got), tokens(expected))
            assert "Paris" in smollm2_tokenizer.decode(got[0].token_ids)  # a pretrained model, not noise
        else:  # the other backend's test moved hf's weights: start this engine from them
            sync_weights(generator, trainer_model, hf.version)
        _sync_check(generator, hf, trainer_model, chat_prompts, seed=7 if backend == "vllm" else 8)
    finally:
        generator.close()
