"""weight_sync=inprocess, one rank: the engine core runs in this process and loads the trainer's tensors by reference.

Run by tests/rollout/test_inprocess_sync.py in a fresh interpreter (an in-process engine joins this
process's torch.distributed world and vLLM state, which a long pytest session shares with every test before it).

A spy watches the sync: no copy of a trainer tensor (to another device, or a clone), no weights file in
/dev/shm or the temp dir, no collective. The same spy flags the shm path, so it would catch a fallback.
"""
from __future__ import annotations

import pytest

from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.weight_sync.verify import SyncVerifier

from support.greedy import assert_greedy_matches, tokens
from support.models import load_trainer_model, perturb
from support.sync_spy import spy_on_sync

from .conftest import GREEDY, sample_prompts


@pytest.fixture(scope="module")
def inprocess_generator(tiny_model_dir):
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.vllm_backend import VLLMGenerator
    from gigpo.trainer.distributed import init_distributed

    from gigpo.config import auto_weight_sync

    init_distributed()  # as the trainer does before its generator: the in-process engine joins this world
    # what rollout.weight_sync=auto picks for one rank on CUDA in sync mode, run here on the CPU
    weight_sync = auto_weight_sync("vllm", nprocs=1, mode="sync", device="cuda")
    gen = VLLMGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=True,
                                                           weight_sync=weight_sync))
    yield gen
    gen.close()


def test_inprocess_sync_copies_nothing_and_matches_the_trainer(inprocess_generator, tiny_model_dir):
    gen = inprocess_generator
    assert gen.takes_device_tensors
    assert type(gen.llm.llm_engine.engine_core).__name__ == "InprocClient", "engine core in a separate process"
    model = load_trainer_model(tiny_model_dir)
    hf = HFGenerator(str(tiny_model_dir), dtype="fp32")
    verifier = SyncVerifier(gen, gen.vocab_size, atol=2e-3)
    prompts = sample_prompts(6, seed=27)
    for seed in (120, 121):  # two syncs: the second loads over weights the first loaded by reference
        perturb(model, seed=seed)
        version = gen.version + 1
        hf.update_weights(model.named_parameters(), version)
        expected = [c.token_ids for c in hf.generate(prompts, GREEDY)]
        assert [c.token_ids for c in gen.generate(prompts, GREEDY)] != expected, "perturbation too small"
        with spy_on_sync(model) as spy:  # tied head: the trainer lists no lm_head.weight
            gen.update_weights([(n, p) for n, p in model.named_parameters() if n != "lm_head.weight"], version)
        assert spy.events == []
        synced = gen.generate(prompts, GREEDY)
        assert_greedy_matches(hf.model, prompts, tokens(synced), expected)
        assert {c.weight_version for c in synced} == {version}
        assert verifier.check(model) <= 2e-3


def test_spy_flags_the_shm_path(inprocess_generator, tiny_model_dir):
    """The file path (the default on CPU) writes the model to /dev/shm: the spy must say so. (The parameters own
    their storage, so the file takes them without a clone: weight_sync.tensors.full_state_dict.)"""
    gen = inprocess_generator
    model = load_trainer_model(tiny_model_dir)
    gen.weight_sync = "shm"
    try:
        with spy_on_sync(model) as spy:
            gen.update_weights(model.named_parameters(), gen.version + 1)
    finally:
        gen.weight_sync = "inprocess"
    kinds = {e.split()[0] for e in spy.events}
    assert "safetensors.save_file" in kinds, spy.events


def test_inprocess_sync_skipping_the_tied_head_fails_verification(inprocess_generator, tiny_model_dir):
    """The head is sent by reference from the embedding; without it the probe shows the stale head."""
    from gigpo.rollout.weight_sync.verify import SyncMismatchError

    gen = inprocess_generator
    model = load_trainer_model(tiny_model_dir)
    verifier = SyncVerifier(gen, gen.vocab_size, atol=2e-3)
    perturb(model, seed=130)
    gen.fault_skip_lm_head = True
    try:
        gen.update_weights(model.named_parameters(), gen.version + 1)
    finally:
        gen.fault_skip_lm_head = False
    with pytest.raises(SyncMismatchError):
        verifier.check(model)


def test_zero3_actor_syncs_in_process_without_copies(inprocess_generator, tiny_model_dir):
    """The trainer's own path: a DeepSpeed ZeRO-3 actor gathers module by module (`push_weights`,
    `named_weights(on_device=True)`) straight into the engine; the probe then scores like the actor."""
    import dataclasses

    import deepspeed

    from gigpo.config import build_config
    from gigpo.trainer.engines import ActorEngine, settings_from_config
    from gigpo.rollout.weight_sync import push_weights

    gen = inprocess_generator
    engine, loss = settings_from_config(build_config({"model": {"init": "tiny", "dtype": "fp32"}}))
    actor = ActorEngine(str(tiny_model_dir), dataclasses.replace(engine, zero_stage=3, micro_token_budget=48,
                                                                 mini_batch_size=6, mini_batches=None), loss)
    model = actor.hf_module()
    verifier = SyncVerifier(gen, gen.vocab_size, atol=2e-3)
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
        perturb(model, seed=140)  # an optimiser step's worth of change, written back to the partitions
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        stale = verifier.gaps(model)
    assert max(float((got - ref).abs().max()) for _, got, ref in stale) > 2e-3, "perturbation too small"
    with spy_on_sync(model) as spy:
        push_weights(actor, gen, gen.version + 1)
    assert spy.events == []
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        assert verifier.check(model) <= 2e-3
