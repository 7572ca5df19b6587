"""The optimizer step of a bf16 actor at ZeRO-0 (one rank): flat, not one piece of work per parameter.

Two models that differ only in depth (1 and 4 layers of the tiny Qwen2: 14 and 50 parameter tensors) take one
update each on the same samples; what the host waits for (support.dispatch.HostSyncs) must not grow with the
parameter count, and at one rank no gradient is all-reduced.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes

import gigpo.trainer.engines as engines
from gigpo.trainer.engines import ActorEngine
from support.dispatch import HostSyncs
from trainer_helpers import engine_settings, loss_settings

BF16 = engine_settings(zero_stage=0, dtype="bf16", micro_token_budget=96, mini_batch_size=6, lr=1e-3, grad_clip=1.0)


@pytest.fixture(scope="module")
def models_by_depth(tiny_model_dir: Path, tmp_path_factory) -> dict[int, str]:
    """The tiny model's shape with 1 and 4 layers, seeded random weights (no tokenizer: the engines need none)."""
    from transformers import AutoConfig, Qwen2ForCausalLM

    out = {}
    for layers in (1, 4):
        config = AutoConfig.from_pretrained(tiny_model_dir)
        config.num_hidden_layers = layers
        config.layer_types = ["full_attention"] * layers  # transformers checks it against the layer count
        torch.manual_seed(0)
        path = tmp_path_factory.mktemp(f"layers{layers}")
        Qwen2ForCausalLM(config).save_pretrained(path)
        out[layers] = str(path)
    return out


def _with_old_logprobs(actor: ActorEngine, samples):
    for sample, logp in zip(samples, actor.compute_log_probs(samples)):
        sample.logp_old, sample.advantage = logp, 1.0 if len(sample.response_ids) % 2 else -1.0
    return samples


def test_host_syncs_of_an_optimizer_step_do_not_grow_with_the_parameter_count(models_by_depth, samples, monkeypatch):
    laid_out = engines.collate

    def on_the_host(*args, **kwargs):  # collate builds CPU tensors before they move: no device to wait for
        with _disable_current_modes():
            return laid_out(*args, **kwargs)

    monkeypatch.setattr(engines, "collate", on_the_host)
    calls, tensors = {}, {}
    for layers, path in models_by_depth.items():
        actor = ActorEngine(path, BF16, loss_settings(kl_coef=0.0))
        tensors[layers] = sum(1 for p in actor.engine.module.parameters() if p.requires_grad)
        _with_old_logprobs(actor, samples)
        step = actor.engine.step

        def spied_step(*args, _step=step, _layers=layers, **kwargs):
            with HostSyncs() as syncs:
                result = _step(*args, **kwargs)
            calls[_layers] = syncs.calls
            return result

        monkeypatch.setattr(actor.engine, "step", spied_step)
        with HostSyncs() as update:
            metrics = actor.update(samples)
        assert metrics["actor/optimizer_steps"] == 1.0 and metrics["actor/grad_norm"] > 0
        calls[("update", layers)] = update.calls
    assert tensors[4] == tensors[1] + 3 * 12  # 12 tensors a layer
    # the flat step reads the norm's validity and the clip decision: 2 reads for either model (fused AdamW keeps
    # its step count on the device; FP16_UnfusedOptimizer, built for bf16 at ZeRO-0 before, made 2 per parameter
    # tensor and 3 more: 31 and 103)
    assert calls[1] == calls[4] and len(calls[4]) <= 2, calls
    assert calls[("update", 1)] == calls[("update", 4)], calls


def test_one_rank_all_reduces_no_gradient(tiny_model_dir, samples, monkeypatch):
    """DeepSpeed flattens, all-reduces and copies back every gradient at each step, at one rank too; the
    engines switch that off there (fp32 as well: dividing by a world size of 1 changed nothing)."""
    import deepspeed.comm

    reduced: list[int] = []
    real = deepspeed.comm.all_reduce

    def counting(tensor, *args, **kwargs):
        reduced.append(tensor.numel())
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(deepspeed.comm, "all_reduce", counting)
    for settings in (BF16, dataclasses.replace(BF16, dtype="fp32")):
        actor = ActorEngine(str(tiny_model_dir), settings, loss_settings(kl_coef=0.0))
        actor.update(_with_old_logprobs(actor, samples))
        # fp32's clipping (DeepSpeed's clip_grad_norm_) still averages its 1-element norm over the ranks
        assert [n for n in reduced if n > 1] == [], (settings.dtype, reduced)


def test_bf16_checkpoint_resumes_the_fp32_master_weights_exactly(tiny_model_dir, samples, tmp_path):
    """A restored bf16 actor continues bit for bit: its fp32 master weights and Adam moments come from the
    checkpoint, not from the bf16 weights (which would round every master weight to 8 bits of mantissa)."""
    original = ActorEngine(str(tiny_model_dir), BF16, loss_settings(kl_coef=0.0))
    original.update(_with_old_logprobs(original, samples))
    original.save_state(str(tmp_path), "one")
    restored = ActorEngine(str(tiny_model_dir), BF16, loss_settings(kl_coef=0.0))
    restored.load_state(str(tmp_path), "one")
    masters = [opt.fp32_groups_flat_partition[0] for opt in (original.engine.optimizer, restored.engine.optimizer)]
    assert torch.equal(*masters)
    assert not torch.equal(masters[0], masters[0].bfloat16().float())  # they hold more than the bf16 weights do
    for actor in (original, restored):
        actor.update(_with_old_logprobs(actor, samples))
    after = dict(original.named_weights())
    for name, tensor in restored.named_weights():
        assert torch.equal(tensor, after[name]), name
    # a checkpoint of a bf16 engine from before (FP16_UnfusedOptimizer: its Adam state inside the model states
    # file, no flat fp32 state) is refused with the way out, not with DeepSpeed's missing-file error
    old = tmp_path / "before" / "one"
    old.mkdir(parents=True)
    (old / "mp_rank_00_model_states.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"without its flat fp32 state.*model.path=<that checkpoint>/hf"):
        restored.load_state(str(tmp_path / "before"), "one")
