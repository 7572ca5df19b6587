"""Checkpoints: round-trip of weights, optimizer, scheduler, RNG and loop state; crash leftovers ignored."""
from __future__ import annotations

import json
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gigpo.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from gigpo.trainer.engines import ActorEngine
from trainer_helpers import engine_settings, loss_settings

SETTINGS = engine_settings(zero_stage=2, micro_token_budget=512, mini_batch_size=6, lr=1e-3,
                          warmup_steps=4)


def _train_once(actor, samples):
    for s, lp in zip(samples, actor.compute_log_probs(samples)):
        s.logp_old = lp
        s.advantage = 1.0 if len(s.response_ids) % 2 else -1.0
    return actor.update(samples)


def _optimizer_state(actor) -> dict[str, torch.Tensor]:
    """The first parameter group's Adam moments, as the optimizer holds them (ZeRO-2 flat partitions)."""
    opt = actor.engine.optimizer
    inner = getattr(opt, "optimizer", opt)
    out = {}
    for k, state in enumerate(inner.state.values()):
        for name in ("exp_avg", "exp_avg_sq"):
            out[f"{k}.{name}"] = state[name].clone()
    assert out, "optimizer holds no state after a step"
    return out


def test_round_trip_restores_weights_optimizer_scheduler_rng_and_loop_state(tiny_model_dir, samples, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    actor = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.0))
    first = _train_once(actor, samples)
    assert first["actor/lr"] == pytest.approx(1e-3 / 4)  # warm-up step 1 of 4
    saved_weights = dict(actor.named_weights())
    saved_opt = _optimizer_state(actor)
    saved_lr = actor.engine.get_lr()[0]
    path = save_checkpoint(tmp_path, 1, actor, tokenizer, loop_state={"next_seed": 17}, keep_last=2)
    expected_draws = (random.random(), torch.rand(3))

    assert path == tmp_path / "checkpoints" / "1"
    assert latest_checkpoint(tmp_path) == path
    hf = AutoModelForCausalLM.from_pretrained(path / "hf", dtype=torch.float32)
    for name, tensor in hf.state_dict().items():
        torch.testing.assert_close(tensor, saved_weights[name])
    assert AutoTokenizer.from_pretrained(path / "hf").encode("go north") == tokenizer.encode("go north")

    fresh = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.0))
    _train_once(fresh, samples)  # two updates: weights, moments and LR all differ from the saved ones
    _train_once(fresh, samples)
    assert any(not torch.equal(t, saved_weights[n]) for n, t in fresh.named_weights())
    assert fresh.engine.get_lr()[0] != pytest.approx(saved_lr)
    random.random(), torch.rand(3)
    state = load_checkpoint(path, fresh)
    assert state.iteration == 1 and state.loop_state == {"next_seed": 17}
    for name, tensor in fresh.named_weights():
        torch.testing.assert_close(tensor, saved_weights[name])
    for key, tensor in _optimizer_state(fresh).items():
        torch.testing.assert_close(tensor, saved_opt[key])
    assert fresh.engine.get_lr()[0] == pytest.approx(saved_lr)  # mid warm-up: the scheduler step was restored
    assert fresh.updates == actor.updates
    assert random.random() == expected_draws[0]
    assert torch.equal(torch.rand(3), expected_draws[1])

    # resumed and original training continue identically
    m_orig, m_fresh = _train_once(actor, samples), _train_once(fresh, samples)
    assert m_fresh["loss/policy"] == pytest.approx(m_orig["loss/policy"], rel=1e-5)

    # a crash while writing iteration 2 leaves a temp dir; one without meta.json is also incomplete
    (tmp_path / "checkpoints" / ".tmp-2" / "hf").mkdir(parents=True)
    (tmp_path / "checkpoints" / "3").mkdir()
    assert latest_checkpoint(tmp_path) == path
    with pytest.raises(FileNotFoundError, match="not a complete gigpo checkpoint"):
        load_checkpoint(tmp_path / "checkpoints" / "3", fresh)

    # saving over the crash leftovers works, and only the newest keep_last survive
    for iteration in (2, 4, 5):
        save_checkpoint(tmp_path, iteration, actor, tokenizer, keep_last=2)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit() and (p / "meta.json").exists())
    assert kept == ["4", "5"]
    assert not (tmp_path / "checkpoints" / ".tmp-2").exists()
    assert json.loads((latest_checkpoint(tmp_path) / "meta.json").read_text())["iteration"] == 5


def test_loop_state_that_cannot_be_stored_fails_before_writing(tiny_model_dir, tmp_path):
    actor = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.0))
    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, 1, actor, loop_state={"bad": object()})
    assert latest_checkpoint(tmp_path) is None


def test_critic_is_saved_and_restored_with_the_actor(tiny_model_dir, samples, tmp_path):
    from gigpo.trainer.engines import CriticEngine

    actor = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.0))
    critic_settings = engine_settings(micro_token_budget=512, mini_batch_size=6, lr=1e-3)

    def trained_critic(updates: int) -> CriticEngine:
        critic = CriticEngine(str(tiny_model_dir), critic_settings, loss_settings())
        for s in samples:
            s.returns = torch.ones(len(s.response_ids))
        for _ in range(updates):
            critic.update(samples)
        return critic

    critic = trained_critic(1)
    saved = {n: p.detach().clone() for n, p in critic.engine.module.named_parameters()}
    without = save_checkpoint(tmp_path / "a", 1, actor)
    with_critic = save_checkpoint(tmp_path / "b", 1, actor, critic=critic)
    other = trained_critic(2)
    with pytest.raises(ValueError, match="has no critic"):
        load_checkpoint(without, actor, other)
    load_checkpoint(with_critic, actor, other)
    for name, p in other.engine.module.named_parameters():
        torch.testing.assert_close(p, saved[name])
    assert other.updates == 1
