"""Engine settings: one frozen object from the recipe; `gigpo serve` options round-trip; turns resolve per backend."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from gigpo.config import RolloutConfig, load_config
from gigpo.rollout.engine_settings import EngineSettings


def test_defaults_are_the_recipe_defaults_and_the_serve_options_round_trip():
    rollout = RolloutConfig()
    d = EngineSettings()
    assert (d.kv_cache_gb, d.gpu_memory_utilization, d.max_num_seqs, d.enable_prefix_caching, d.enforce_eager,
            d.weight_sync) == (rollout.kv_cache_gb, rollout.gpu_memory_utilization, rollout.max_num_seqs,
                               rollout.enable_prefix_caching, rollout.enforce_eager, rollout.weight_sync)
    config = load_config("recipes/sokoban_tiny.yaml", ["rollout.kv_cache_gb=2.5", "rollout.enable_prefix_caching=false"])
    engine = EngineSettings.from_config(config.rollout, config.model.dtype, seed=7)
    assert engine.max_model_len == config.rollout.max_prompt_tokens + config.rollout.max_new_tokens
    parser = argparse.ArgumentParser()
    EngineSettings.add_cli_options(parser)
    assert EngineSettings.from_cli(parser.parse_args(engine.cli_args())) == engine
    assert EngineSettings.from_cli(parser.parse_args([])) == EngineSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.seed = 1  # type: ignore[misc]


def test_bad_settings_name_the_input():
    with pytest.raises(ValueError, match="dtype='fp16' is not supported; use one of bf16"):
        EngineSettings(dtype="fp16")
    with pytest.raises(ValueError, match="weight_sync='tcp'"):
        EngineSettings(weight_sync="tcp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no adapter route"):
        EngineSettings(max_lora_rank=8).cli_args()


def test_auto_turns_resolve_per_backend(tiny_model_dir):
    from gigpo.rollout.factory import AUTO_TURNS, generator_from_config

    assert AUTO_TURNS == {"hf": "batched", "vllm": "async", "vllm-server": "batched"}
    config = load_config("recipes/sokoban_tiny.yaml", [])
    generator = generator_from_config(config.rollout, str(tiny_model_dir), config.model.dtype)
    assert config.rollout.turns == "auto" and generator.turns == "batched" and not generator.can_submit


def test_a_generator_built_without_a_recipe_starts_with_the_config_default_turns(tiny_model_dir):
    """rollout.turns' default (auto) means the same whether the factory or a backend's constructor resolves it."""
    from gigpo.rollout.generator import Generator, resolve_turns
    from gigpo.rollout.hf_backend import HFGenerator
    from gigpo.rollout.server_client import ServerGenerator
    from gigpo.rollout.vllm_backend import VLLMGenerator

    default = RolloutConfig().turns
    assert [resolve_turns(default, b.rollout_backend, 1) for b in (HFGenerator, VLLMGenerator, ServerGenerator)] == \
        ["batched", "async", "batched"]
    assert resolve_turns(default, "vllm", 2) == "batched"  # the ranks of one engine send the same requests
    assert resolve_turns("async", "hf", 1) == "async"      # a recipe's choice is kept (the config refuses it for hf)

    class Scripted(Generator):  # a test's policy: none of the backends, so whole turns
        generate = update_weights = None  # type: ignore[assignment]

    assert Scripted().turns == "batched"
    generator = HFGenerator(str(tiny_model_dir), dtype="fp32")
    try:
        assert generator.turns == "batched"
    finally:
        generator.close()


@pytest.mark.parametrize("backend", ["hf", "vllm-server"])
def test_inprocess_sync_needs_the_in_process_vllm_backend(backend):
    with pytest.raises(ValueError, match="weight_sync=inprocess.*rollout.backend=vllm"):
        RolloutConfig(backend=backend, weight_sync="inprocess")
    assert RolloutConfig(backend="vllm", weight_sync="inprocess").weight_sync == "inprocess"
    assert EngineSettings(weight_sync="inprocess").weight_sync == "inprocess"
    with pytest.raises(ValueError, match="weight_sync='file'"):
        EngineSettings(weight_sync="file")
