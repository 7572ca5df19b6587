"""vLLM's sleep mode through gigpo's memory phases on CUDA: the update phase frees the engine's share, and
after waking and a sync the engine (CUDA graphs on) samples like transformers again, at levels 1 and 2."""
from __future__ import annotations

import pytest
import torch

from gpu_marks import requires_cuda
from gigpo.config import Config, load_config
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.weight_sync import sync_weights
from gigpo.rollout.vllm_backend import VLLMGenerator
from gigpo.trainer.memory_phases import MemoryPhases
from rollout.conftest import GREEDY, sample_prompts
from support.greedy import assert_greedy_matches, tokens
from support.models import load_trainer_model, perturb

pytestmark = requires_cuda


def sleeping_engine_config(model_dir, level: int) -> Config:
    """The recipe these tests build their memory phases from (loaded on CPU too: tests/gpu/test_setup_on_cpu.py)."""
    return load_config("recipes/sokoban_tiny.yaml", [f"model.path={model_dir}", "rollout.backend=vllm",
                                                     f"rollout.sleep_level={level}",
                                                     "rollout.gpu_memory_utilization=0.3", "model.dtype=fp32"])


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_the_share_and_a_synced_engine_matches_hf(tiny_model_dir, level):
    config = sleeping_engine_config(tiny_model_dir, level)
    generator = VLLMGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, sleep_level=level,
                                                                  gpu_memory_utilization=0.3))
    try:
        assert generator.can_sleep
        phases = MemoryPhases.from_config(config, generator, None)
        share = 0.3 * torch.cuda.mem_get_info()[1] / 2**30
        free_asleep = phases.enter("update")["perf/gpu_free_gb/update"]
        free_awake = phases.enter("generation")["perf/gpu_free_gb/generation"]
        assert free_asleep - free_awake > 0.5 * share, (free_asleep, free_awake, share)
        model = load_trainer_model(tiny_model_dir).cuda()
        hf = HFGenerator(str(tiny_model_dir), dtype="fp32")
        prompts = sample_prompts(6, seed=41)
        for version, seed in ((1, 700), (2, 701)):
            phases.enter("update")
            perturb(model.cpu(), seed=seed)
            model.cuda()
            phases.enter("generation")
            sync_weights(generator, model, version)
            hf.update_weights(model.named_parameters(), version)
            assert_greedy_matches(hf.model, prompts, tokens(generator.generate(prompts, GREEDY)),
                                  tokens(hf.generate(prompts, GREEDY)))  # fp32 attention runs in TF32 on CUDA
    finally:
        generator.close()
