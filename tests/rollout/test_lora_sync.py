"""A LoRA actor's weights reach every backend merged, under the base model's names, and verified.

The actor is a real DeepSpeed engine with peft adapters. "HF with adapters applied" is transformers'
generate on the base model with the adapters of the actor's checkpoint loaded by peft; the generators
must equal it after the sync (the loop's own `push_weights`, with the probe verifier) and differ
before it. The server starts from the merged model of a checkpoint, so vLLM's loading of it is checked too.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from gigpo.config import build_config
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.server_client import ServerGenerator
from gigpo.rollout.weight_sync import push_weights
from gigpo.rollout.weight_sync.verify import SyncVerifier
from gigpo.trainer.checkpoint import save_checkpoint

from support.greedy import FP32_TOLERANCE, assert_greedy_matches, tokens
from support.run import servers_start_with_engine_core_in_process

from .conftest import GREEDY, sample_prompts

PROMPTS = sample_prompts(6, seed=21)


@pytest.fixture(scope="module")
def actor(tiny_model_dir):
    from gigpo.trainer.engines import ActorEngine, settings_from_config

    config = build_config({"model": {"init": "tiny", "dtype": "fp32", "lora": {"enabled": True, "rank": 8}},
                           "trainer": {"zero_stage": 2, "micro_token_budget": 512}})
    settings, loss = settings_from_config(config)
    return ActorEngine(str(tiny_model_dir), settings, loss)


@torch.no_grad()
def perturb_adapters(actor, seed: int, scale: float = 0.3) -> None:
    """Move the adapters (B starts at zero, so the adapted model starts equal to the base)."""
    gen = torch.Generator().manual_seed(seed)
    for _, p in actor.hf_module().named_parameters():
        if p.requires_grad:
            p.add_(torch.randn(p.shape, generator=gen).to(p.device) * scale)  # the same draws on a GPU actor


def checkpoint_with_new_adapters(actor, tokenizer_dir: Path, run_dir: Path, seed: int) -> Path:
    from transformers import AutoTokenizer

    perturb_adapters(actor, seed)
    return save_checkpoint(run_dir, seed, actor, AutoTokenizer.from_pretrained(tokenizer_dir))


def with_adapters(base_dir: Path, adapter_dir: Path) -> HFGenerator:
    """transformers on the base model with peft's adapters applied (not merged): the reference."""
    from peft import PeftModel

    hf = HFGenerator(str(base_dir), dtype="fp32")
    hf.model = PeftModel.from_pretrained(hf.model, str(adapter_dir)).eval()
    return hf


def assert_answers_like_adapters(generator, base_dir: Path, adapter_dir: Path) -> None:
    """`generator`'s greedy answers are those of HF with the adapters, up to near-ties (support/greedy.py)."""
    reference = with_adapters(base_dir, adapter_dir)
    assert_greedy_matches(reference.model, PROMPTS, tokens(generator.generate(PROMPTS, GREEDY)),
                          tokens(reference.generate(PROMPTS, GREEDY)))


def greedy_with_adapters(base_dir: Path, adapter_dir: Path) -> list[list[int]]:
    return tokens(with_adapters(base_dir, adapter_dir).generate(PROMPTS, GREEDY))


def check_sync(actor, generator, tiny_model_dir: Path, run_dir: Path, seed: int) -> None:
    ckpt = checkpoint_with_new_adapters(actor, tiny_model_dir, run_dir, seed)
    expected = greedy_with_adapters(tiny_model_dir, ckpt / "adapter")
    assert [c.token_ids for c in generator.generate(PROMPTS, GREEDY)] != expected, "stale weights look synced"
    verifier = SyncVerifier(generator, actor.hf_module().config.vocab_size, *FP32_TOLERANCE)
    push_weights(actor, generator, version=generator.version + 1, verifier=verifier)  # raises on a mismatch
    assert_answers_like_adapters(generator, tiny_model_dir, ckpt / "adapter")


def test_merged_checkpoint_loads_in_plain_transformers(actor, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt = checkpoint_with_new_adapters(actor, tiny_model_dir, tmp_path, seed=5)
    expected = greedy_with_adapters(tiny_model_dir, ckpt / "adapter")
    merged = HFGenerator(str(ckpt / "hf"), dtype="fp32")  # merged weights: other sums, so near-ties may part
    assert_answers_like_adapters(merged, tiny_model_dir, ckpt / "adapter")
    assert not any("lora" in n for n, _ in AutoModelForCausalLM.from_pretrained(ckpt / "hf").named_parameters())
    base = HFGenerator(str(tiny_model_dir), dtype="fp32")
    assert [c.token_ids for c in base.generate(PROMPTS, GREEDY)] != expected


def test_hf_backend_sync(actor, tiny_model_dir, tmp_path):
    check_sync(actor, HFGenerator(str(tiny_model_dir), dtype="fp32"), tiny_model_dir, tmp_path, seed=6)


def test_vllm_backend_sync(actor, vllm_generator, tiny_model_dir, tmp_path):
    check_sync(actor, vllm_generator, tiny_model_dir, tmp_path, seed=7)


def test_vllm_server_starts_from_a_merged_checkpoint_and_syncs(actor, tiny_model_dir, tmp_path):
    ckpt = checkpoint_with_new_adapters(actor, tiny_model_dir, tmp_path / "start", seed=8)
    with servers_start_with_engine_core_in_process():  # the subject is what the server loads, not its processes
        server = ServerGenerator(str(ckpt / "hf"), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=True),
                                 num_servers=1, log_dir=str(tmp_path / "serve"))
    try:  # vLLM loads the merged checkpoint: it generates what the adapters do
        assert_answers_like_adapters(server, tiny_model_dir, ckpt / "adapter")
        check_sync(actor, server, tiny_model_dir, tmp_path / "sync", seed=9)
    finally:
        server.close()


def test_vllm_adapter_only_sync_equals_hf_with_adapters(actor, tiny_model_dir, tmp_path):
    """vLLM's own LoRA (enable_lora, one LoRARequest per version) serves peft's files unmerged."""
    from gigpo.rollout.vllm_backend import VLLMGenerator

    generator = VLLMGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=True,
                                                                  max_lora_rank=8))
    try:
        for seed in (10, 11):  # the second adapter replaces the first
            ckpt = checkpoint_with_new_adapters(actor, tiny_model_dir, tmp_path / str(seed), seed)
            expected = greedy_with_adapters(tiny_model_dir, ckpt / "adapter")
            assert [c.token_ids for c in generator.generate(PROMPTS, GREEDY)] != expected
            verifier = SyncVerifier(generator, actor.hf_module().config.vocab_size, *FP32_TOLERANCE)
            generator.load_adapter(ckpt / "adapter", version=generator.version + 1)
            assert verifier.check(actor.hf_module()) < 2e-3
            assert_answers_like_adapters(generator, tiny_model_dir, ckpt / "adapter")
        assert set(generator.llm.llm_engine.list_loras()) == {generator.version}
    finally:
        generator.close()
