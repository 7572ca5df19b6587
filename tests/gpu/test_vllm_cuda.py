"""vLLM on CUDA: greedy output equals transformers', and stays equal after perturb + sync, by shared
memory, by broadcast into an in-process engine on the trainer's GPU (gloo), and by NCCL to a server on
a second GPU; the probe verifier catches broken syncs; LoRA's merged weights sync."""
from __future__ import annotations

import pytest
import torch

from gpu_marks import requires_cuda, requires_gpus
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.server_client import ServerGenerator
from rollout.conftest import GREEDY, sample_prompts
from support.models import load_trainer_model, perturb
# The CPU tests themselves, collected again here with this module's CUDA skip:
from rollout.test_lora_sync import actor, test_vllm_backend_sync  # noqa: F401
from rollout.test_vllm import (trained, test_broadcast_sync_makes_greedy_equal_to_hf,  # noqa: F401
                               test_stop_token_ids_end_completions_like_hf, test_sync_makes_greedy_equal_to_hf,
                               test_verification_catches_a_broken_sync)

pytestmark = requires_cuda


def test_engine_and_reference_run_on_the_gpu(vllm_generator, tiny_model_dir):
    """The generators under test are on CUDA (not a CPU fallback), and greedy output is equal before any sync."""
    from vllm.platforms import current_platform

    assert current_platform.is_cuda()
    hf = HFGenerator(str(tiny_model_dir), dtype="fp32")
    assert next(hf.model.parameters()).is_cuda
    model = load_trainer_model(tiny_model_dir)
    vllm_generator.update_weights(model.named_parameters(), vllm_generator.version + 1)  # base weights
    prompts = sample_prompts(8, seed=31)
    assert [c.token_ids for c in vllm_generator.generate(prompts, GREEDY)] == \
        [c.token_ids for c in hf.generate(prompts, GREEDY)]


@requires_gpus(2)
def test_nccl_sync_to_a_server_on_the_second_gpu(tiny_model_dir, tmp_path, monkeypatch):
    """NCCL needs each rank on its own GPU: the server runs on GPU 1, the trainer's tensors sit on GPU 0."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # inherited by the server process only
    server = ServerGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=True),
                             num_servers=1, log_dir=str(tmp_path))
    monkeypatch.undo()
    external = ServerGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", weight_sync="nccl"),
                               urls=[server.servers[0].url])
    try:
        model = load_trainer_model(tiny_model_dir).to("cuda:0")
        hf = HFGenerator(str(tiny_model_dir), dtype="fp32")
        prompts = sample_prompts(6, seed=32)
        for seed in (600, 601):
            perturb(model.cpu(), seed=seed)
            model.to("cuda:0")
            version = external.version + 1
            hf.update_weights(model.named_parameters(), version)
            expected = [c.token_ids for c in hf.generate(prompts, GREEDY)]
            external.update_weights(model.named_parameters(), version)
            assert external._nccl_senders[server.servers[0].url].backend == "nccl"
            assert [c.token_ids for c in external.generate(prompts, GREEDY)] == expected
    finally:
        external.close()
        server.close()
        torch.cuda.empty_cache()
