"""Memory phases and the GPU-layout settings on CPU: phases are a no-op that says so once, the generator
still holds its weights afterwards; the settings' defaults resolve and their bad values are refused."""
from __future__ import annotations

import pytest

from gigpo.config import RecipeError, load_config
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.vllm_backend import parallel_kwargs
from gigpo.trainer import memory_phases
from gigpo.trainer.memory_phases import MemoryPhases

GREEDY_PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 13]]


def test_phases_are_a_no_op_on_cpu_that_logs_once(tiny_model_dir, capsys, monkeypatch):
    from gigpo.rollout.types import SamplingSettings

    monkeypatch.setattr(memory_phases, "_LOGGED", set())
    config = load_config("recipes/sokoban_tiny.yaml", ["model.dtype=fp32", "trainer.offload_reference=true"])
    generator = HFGenerator(str(tiny_model_dir), dtype="fp32")
    greedy = SamplingSettings(temperature=0, max_new_tokens=6)
    before = [c.token_ids for c in generator.generate(GREEDY_PROMPTS, greedy)]
    phases = MemoryPhases.from_config(config, generator, None)  # as set_up builds them: a real generator, no reference
    for phase in ("update", "generation", "update", "generation"):
        assert phases.enter(phase) == {}
    out = capsys.readouterr().out
    assert out.count("memory phases are off on CPU") == 1, out
    assert [c.token_ids for c in generator.generate(GREEDY_PROMPTS, greedy)] == before
    assert next(generator.model.parameters()).device.type == "cpu"


def test_verify_sync_auto_is_on_for_vllm_in_sync_mode_only():
    on = load_config("recipes/alfworld_7b.yaml")
    assert on.rollout.verify_sync is True and on.rollout.sleep_level == 1 and on.rollout.enforce_eager is False
    assert load_config("recipes/alfworld_7b.yaml", ["rollout.backend=hf"]).rollout.verify_sync is False
    assert load_config("recipes/alfworld_7b.yaml", ["rollout.mode=async"]).rollout.verify_sync is False
    assert load_config("recipes/alfworld_7b.yaml", ["rollout.verify_sync=false"]).rollout.verify_sync is False
    with pytest.raises(RecipeError, match="rollout.verify_sync=true compares"):
        load_config("recipes/alfworld_7b.yaml", ["rollout.mode=async", "rollout.verify_sync=true"])


def test_engine_settings_sleep_only_for_the_in_process_engine_in_sync_mode():
    assert EngineSettings.from_config(load_config("recipes/alfworld_7b.yaml").rollout, "bf16").sleep_level == 1
    for override in ("rollout.mode=async", "rollout.backend=vllm-server", "rollout.sleep_level=0"):
        rollout = load_config("recipes/alfworld_7b.yaml", [override]).rollout
        assert EngineSettings.from_config(rollout, "bf16").sleep_level == 0, override


def test_tensor_parallel_size_must_divide_the_ranks():
    config = load_config("recipes/alfworld_7b.yaml", ["rollout.tensor_parallel_size=2"])
    assert config.rollout.tensor_parallel_size == 2
    with pytest.raises(RecipeError, match=r"rollout.tensor_parallel_size=3 must divide trainer.nprocs=8"):
        load_config("recipes/alfworld_7b.yaml", ["rollout.tensor_parallel_size=3"])
    with pytest.raises(RecipeError, match=r"rollout.turns=async with rollout.tensor_parallel_size=2"):
        load_config("recipes/alfworld_7b.yaml", ["rollout.tensor_parallel_size=2", "rollout.turns=async"])
    with pytest.raises(RecipeError, match=r"tensor_parallel_size=2 .*rollout.backend=hf"):
        load_config("recipes/alfworld_7b.yaml", ["rollout.tensor_parallel_size=2", "rollout.backend=hf"])
    assert parallel_kwargs(1, world_size=1) == {}
    # several ranks: each builds its engine in process on its own device (vLLM's external launcher); vLLM's own
    # data parallelism (engines that must generate in lockstep) is never asked for
    for tp, world in ((1, 2), (1, 8), (2, 8)):
        assert parallel_kwargs(tp, world_size=world) == {"tensor_parallel_size": tp,
                                                         "distributed_executor_backend": "external_launcher"}
    # a generation server started by a rank inherits WORLD_SIZE but is no rank: a standalone engine (with the
    # external launcher it would try to join the trainer's rendezvous and fail on its port)
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}):
        assert parallel_kwargs(1) == {}
    with pytest.raises(ValueError, match="must divide the 6 ranks"):
        parallel_kwargs(4, world_size=6)
    with pytest.raises(ValueError, match="gigpo serve"):
        EngineSettings(tensor_parallel_size=2).cli_args()


def test_reference_offload_is_refused_under_zero3():
    with pytest.raises(RecipeError, match="trainer.offload_reference=true needs trainer.zero_stage 0-2"):
        load_config("recipes/alfworld_7b.yaml", ["trainer.offload_reference=true"])
    assert load_config("recipes/alfworld_7b.yaml", ["trainer.offload_reference=true",
                                                     "trainer.zero_stage=2"]).trainer.offload_reference


def test_a_broadcast_sync_into_per_rank_engines_is_refused_on_several_ranks(monkeypatch):
    """Each rank's vLLM engine runs in the rank's process when there are several, so weight_sync=nccl would
    broadcast to no one: the recipe is refused, naming the settings that work."""
    with pytest.raises(RecipeError, match=r"weight_sync=nccl with rollout.backend=vllm and trainer.nprocs=8.*inprocess"):
        load_config("recipes/alfworld_7b.yaml", ["rollout.weight_sync=nccl"])
    assert load_config("recipes/alfworld_7b.yaml", ["rollout.weight_sync=nccl", "trainer.nprocs=1"]).rollout.weight_sync == "nccl"
    # auto: on several ranks each rank's engine takes the gathered weights on the device; one CPU rank keeps the file
    assert load_config("recipes/alfworld_7b.yaml").rollout.weight_sync == "inprocess"
    monkeypatch.setattr("gigpo.config.training_device", lambda: "cpu")
    assert load_config("recipes/alfworld_7b.yaml", ["trainer.nprocs=1"]).rollout.weight_sync == "shm"
    assert load_config("recipes/alfworld_7b.yaml", ["rollout.backend=hf"]).rollout.weight_sync == "shm"
    assert load_config("recipes/alfworld_7b.yaml", ["rollout.weight_sync=shm"]).rollout.weight_sync == "shm"


def test_auto_weight_sync_keeps_one_cuda_rank_on_the_device(monkeypatch):
    """On CUDA one rank in sync mode takes the in-process path (no host copy, no file: the spy of
    tests/rollout/inprocess_sync_cases.py runs that choice on the CPU); CPU ranks and async mode keep the file."""
    import torch

    from gigpo.config import auto_weight_sync

    assert auto_weight_sync("vllm", nprocs=1, mode="sync", device="cuda") == "inprocess"
    assert auto_weight_sync("vllm", nprocs=1, mode="async", device="cuda") == "shm"
    assert auto_weight_sync("vllm", nprocs=1, mode="sync", device="cpu") == "shm"
    assert auto_weight_sync("vllm", nprocs=2, mode="async", device="cpu") == "inprocess"
    assert auto_weight_sync("vllm-server", nprocs=1, mode="sync", device="cuda") == "shm"
    one_rank = ["trainer.nprocs=1", "rollout.backend=vllm"]
    if torch.cuda.is_available():  # what a GPU machine resolves without help
        assert load_config("recipes/alfworld_7b.yaml", one_rank).rollout.weight_sync == "inprocess"
    monkeypatch.setattr("gigpo.config.training_device", lambda: "cuda")
    assert load_config("recipes/alfworld_7b.yaml", one_rank).rollout.weight_sync == "inprocess"
    assert load_config("recipes/alfworld_7b.yaml", [*one_rank, "rollout.mode=async"]).rollout.weight_sync == "shm"
    monkeypatch.setattr("gigpo.config.training_device", lambda: "cpu")
    assert load_config("recipes/alfworld_7b.yaml", one_rank).rollout.weight_sync == "shm"
