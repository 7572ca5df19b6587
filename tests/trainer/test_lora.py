"""LoRA actors and critics (peft under real DeepSpeed engines) on the tiny local model."""
from __future__ import annotations

import dataclasses

import deepspeed
import pytest
import torch
from transformers import AutoModelForCausalLM

from gigpo.config import RecipeError, build_config
from gigpo.trainer.engines import ActorEngine, CriticEngine, ReferenceModel, settings_from_config
from gigpo.trainer.lora import AdapterFreeReference, LoraSettings
from support.tolerance import samples_close
from trainer_helpers import engine_settings, loss_settings

LORA = LoraSettings(rank=8, alpha=16.0, dropout=0.0, target_modules=("all-linear",))
SETTINGS = engine_settings(micro_token_budget=48, mini_batch_size=3, lr=1e-2, grad_clip=1e6, lora=LORA)
ADVANTAGES = [1.0, 0.0, 0.5, -1.0, 0.0, -0.5]


def full_parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole (gathered under ZeRO-3), by its peft name."""
    params = list(module.named_parameters())
    zero3 = any(hasattr(p, "ds_id") for _, p in params)
    ctx = deepspeed.zero.GatheredParameters([p for _, p in params]) if zero3 else None
    if ctx is not None:
        ctx.__enter__()
    try:
        return {n: p.detach().clone() for n, p in params}
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


def train_twice(engine: ActorEngine, samples) -> None:
    """Two updates: while B = 0 the gradient of A is zero, so the first moves only B; the second moves both."""
    for _ in range(2):
        for s, lp, adv in zip(samples, engine.compute_log_probs(samples), ADVANTAGES):
            s.logp_old, s.advantage = lp, adv
        engine.update(samples)


@pytest.mark.parametrize("zero_stage", [0, 2, 3])
def test_update_changes_only_the_adapters(tiny_model_dir, samples, zero_stage):
    actor = ActorEngine(str(tiny_model_dir), dataclasses.replace(SETTINGS, zero_stage=zero_stage),
                        loss_settings(kl_coef=0.0, entropy_coef=0.0))
    module = actor.engine.module
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # 3 layers x 7 linear layers (all-linear leaves out the tied head) x (A, B)
    assert len(trainable) == 3 * 7 * 2
    before = full_parameters(module)
    train_twice(actor, samples)
    after = full_parameters(module)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed == trainable, f"frozen weights changed: {sorted(changed - trainable)[:3]}"
    assert sum(before[n].numel() for n in trainable) < 0.1 * sum(t.numel() for t in before.values())


def test_reference_is_the_base_model_with_adapters_off(tiny_model_dir, samples):
    actor = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.0, entropy_coef=0.0))
    train_twice(actor, samples)
    with_adapters = actor.compute_log_probs(samples)
    reference = AdapterFreeReference(actor).compute_log_probs(samples)
    base = ReferenceModel(str(tiny_model_dir), dataclasses.replace(SETTINGS, lora=None)).compute_log_probs(samples)
    for ref, want, trained in zip(reference, base, with_adapters):  # the same weights through other modules
        torch.testing.assert_close(ref, want, **samples_close(actor.hf_module().config, samples))
    assert max(float((t - b).abs().max()) for t, b in zip(with_adapters, base)) > 1e-2, "adapters had no effect"
    # the adapters are back on after the reference pass
    for again, trained in zip(actor.compute_log_probs(samples), with_adapters):
        torch.testing.assert_close(again, trained, atol=0, rtol=0)


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_named_weights_are_merged_under_the_base_names(tiny_model_dir, samples, zero_stage):
    actor = ActorEngine(str(tiny_model_dir), dataclasses.replace(SETTINGS, zero_stage=zero_stage),
                        loss_settings(kl_coef=0.0, entropy_coef=0.0))
    train_twice(actor, samples)
    merged = dict(actor.named_weights())
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    assert list(merged) == [n for n, _ in plain.named_parameters()] + ["lm_head.weight"]
    plain.load_state_dict(merged, strict=True)
    assert torch.equal(merged["lm_head.weight"], merged["model.embed_tokens.weight"])  # the tied head is untouched
    # the merged model scores like the PeftModel with its adapters
    for got, want in zip([plain_logps(plain, s) for s in samples], actor.compute_log_probs(samples)):
        torch.testing.assert_close(got, want, **samples_close(plain.config, samples))  # W + BA merged vs apart


def plain_logps(model, sample) -> torch.Tensor:
    ids = torch.tensor([sample.prompt_ids + sample.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(sample.prompt_ids) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.response_ids)[:, None])[:, 0]


def test_lora_critic_trains_its_adapters_and_value_head_only(tiny_model_dir, samples):
    critic = CriticEngine(str(tiny_model_dir), dataclasses.replace(SETTINGS, mini_batch_size=6, lr=1e-2), loss_settings())
    module = critic.engine.module
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert any(".lora_A." in n for n in trainable)
    heads = {n for n in trainable if ".lora_" not in n}
    assert heads and all(".score." in n for n in heads)  # peft trains the value head whole
    before = full_parameters(module)
    for s, v in zip(samples, critic.compute_values(samples)):
        s.returns, s.values_old = torch.full_like(v, 1.0), None
    first = critic.update(samples)["critic/value_loss"]
    last = critic.update(samples)["critic/value_loss"]
    after = full_parameters(module)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed <= trainable and heads <= changed
    assert last < first


def test_lora_config_is_off_by_default_and_validated():
    assert build_config({"model": {"init": "tiny"}}).model.lora.enabled is False
    assert settings_from_config(build_config({"model": {"init": "tiny"}}))[0].lora is None
    on = build_config({"model": {"init": "tiny", "lora": {"enabled": True, "rank": 4, "target_modules": ["q_proj"]}}})
    assert settings_from_config(on)[0].lora == LoraSettings(rank=4, alpha=32.0, dropout=0.0, target_modules=("q_proj",))
    for bad, message in [({"rank": 0}, "model.lora.rank=0"), ({"dropout": 1.0}, "model.lora.dropout"),
                         ({"target_modules": []}, "must list module names"),
                         ({"target_modules": ["all-linear", "q_proj"]}, "all-linear already covers"),
                         ({"target_modules": ["lm_head"]}, "not supported"), ({"rnak": 4}, "did you mean model.lora.rank")]:
        with pytest.raises(RecipeError, match=message):
            build_config({"model": {"init": "tiny", "lora": bad}})


def test_unknown_target_module_is_named(tiny_model_dir):
    settings = dataclasses.replace(SETTINGS, lora=dataclasses.replace(LORA, target_modules=("qproj",)))
    with pytest.raises(ValueError, match=r"model.lora.target_modules=\['qproj'\] does not fit this model"):
        ActorEngine(str(tiny_model_dir), settings, loss_settings())


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_checkpoint_keeps_adapters_only_and_resumes_exactly(tiny_model_dir, samples, tmp_path, zero_stage):
    from peft import PeftModel

    from gigpo.trainer.checkpoint import load_checkpoint, save_checkpoint

    settings = dataclasses.replace(SETTINGS, zero_stage=zero_stage)
    loss = loss_settings(kl_coef=0.0, entropy_coef=0.0)
    actor = ActorEngine(str(tiny_model_dir), settings, loss)
    train_twice(actor, samples)
    ckpt = save_checkpoint(tmp_path, 2, actor)
    # peft's format: the base model plus these files is the trained policy
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(ckpt / "adapter"))
    for got, want in zip([plain_logps(peft_model.eval(), s) for s in samples], actor.compute_log_probs(samples)):
        torch.testing.assert_close(got, want, **samples_close(peft_model.config, samples))
    module_files = list((ckpt / "ds" / "actor").glob("*model_states.pt"))
    assert module_files and sum(f.stat().st_size for f in module_files) < (ckpt / "hf" / "model.safetensors").stat().st_size / 4

    resumed = ActorEngine(str(tiny_model_dir), settings, loss)
    load_checkpoint(ckpt, resumed)
    assert resumed.updates == actor.updates
    for a, b in zip(actor.compute_log_probs(samples), resumed.compute_log_probs(samples)):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    train_twice(actor, samples)  # the same next updates (optimizer moments, step counts) from both
    train_twice(resumed, samples)
    original, again = full_parameters(actor.engine.module), full_parameters(resumed.engine.module)
    for name in original:
        torch.testing.assert_close(again[name], original[name], atol=0, rtol=0)
