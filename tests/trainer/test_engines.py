"""Real DeepSpeed engines (one rank, ZeRO-2, fp32) on the tiny local model."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM

from gigpo.trainer.engines import ActorEngine, CriticEngine, NonFiniteError, ReferenceModel
from gigpo.trainer.losses import entropy_from_logits
from support.tolerance import forward_terms, metric_rel, relative_update_gap, reorder_tolerance
from support.tolerance import samples_close as close
from trainer_helpers import engine_settings, loss_settings, with_repeated_prompts

# a budget of 48 tokens splits the samples over several micro-batches, most packing two or more
SETTINGS = engine_settings(zero_stage=2, micro_token_budget=48, mini_batch_size=3, lr=1e-3,
                          grad_clip=1e6)


UPDATE_GAP = 0.05
"""Largest relative gap between two runs' weight updates (support.tolerance.relative_update_gap): measured at most
0.0041 under ATEN_CPU_CAPABILITY default, avx2 and avx512 (scripts/check_cpu_kernels.sh); Adam's steps
on near-zero gradients differ by float noise there, while a real gradient bug makes the gap O(1)."""


def hf_reference(model, sample, temperature=1.0):
    """Log-probs and entropies of one sample from a plain, unpacked HF forward."""
    ids = torch.tensor([sample.prompt_ids + sample.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float() / temperature
    p = len(sample.prompt_ids)
    step = logits[p - 1:-1]
    logp = torch.log_softmax(step, -1).gather(-1, torch.tensor(sample.response_ids)[:, None])[:, 0]
    return logp, entropy_from_logits(step)


@pytest.fixture(scope="module")
def actor(tiny_model_dir):
    return ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.0, entropy_coef=0.0))


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("layout", ["packed", "padded", "shared"])
def test_log_probs_equal_plain_hf_forward(tiny_model_dir, hf_model, samples, layout):
    samples = with_repeated_prompts(samples)  # the shared layout lays each prompt out once
    # a fresh reference model: the actor fixture may have been updated by other tests
    ref = ReferenceModel(str(tiny_model_dir), dataclasses.replace(SETTINGS, layout=layout))
    assert ref.layout == layout
    logps, entropies = ref.compute_log_probs(samples, with_entropy=True)
    for sample, logp, ent in zip(samples, logps, entropies):
        want_logp, want_ent = hf_reference(hf_model, sample)
        assert logp.shape == (len(sample.response_ids),)
        torch.testing.assert_close(logp, want_logp, **close(hf_model.config, samples))
        torch.testing.assert_close(ent, want_ent, **close(hf_model.config, samples))
    hot = ReferenceModel(str(tiny_model_dir), engine_settings(micro_token_budget=48, temperature=0.7, layout=layout))
    # temperature 0.7 scales the logits by 1/0.7, and their rounding gaps with them
    hot_close = {k: v / 0.7 for k, v in close(hf_model.config, samples).items()}
    torch.testing.assert_close(hot.compute_log_probs(samples[:1])[0], hf_reference(hf_model, samples[0], 0.7)[0],
                               **hot_close)


def test_actor_log_probs_match_hf_before_training(tiny_model_dir, hf_model, samples):
    fresh = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings())
    for sample, logp in zip(samples, fresh.compute_log_probs(samples)):
        torch.testing.assert_close(logp, hf_reference(hf_model, sample)[0], **close(hf_model.config, samples))


def test_update_moves_log_probs_with_the_advantage_sign(actor, samples):
    before = actor.compute_log_probs(samples)
    for s, lp in zip(samples, before):
        s.logp_old = lp
    samples[0].advantage, samples[3].advantage = 1.0, -1.0  # the rest stay 0
    metrics = actor.update(samples)
    after = actor.compute_log_probs(samples)
    assert after[0].sum() > before[0].sum() + 0.05
    assert after[3].sum() < before[3].sum() - 0.05
    assert metrics["actor/optimizer_steps"] == 2.0  # 6 samples / mini_batch_size 3
    assert metrics["perf/micro_batches"] > metrics["actor/optimizer_steps"]  # some mini-batch was split
    assert 0.0 < metrics["perf/budget_fill"] <= 1.0
    assert metrics["actor/grad_norm"] > 0
    assert abs(metrics["loss/clip_frac"]) < 0.5
    assert {"loss/policy", "loss/entropy", "loss/total", "actor/lr"} <= metrics.keys()


def test_update_requires_old_and_ref_log_probs(tiny_model_dir, samples):
    kl_actor = ActorEngine(str(tiny_model_dir), SETTINGS, loss_settings(kl_coef=0.1))
    with pytest.raises(ValueError, match="logp_old"):
        kl_actor.update(samples)
    for s, lp in zip(samples, kl_actor.compute_log_probs(samples)):
        s.logp_old = lp
    with pytest.raises(ValueError, match="kl_coef=0.1 needs logp_ref"):
        kl_actor.update(samples)


@pytest.mark.parametrize("layout", ["packed", "padded", "shared"])
def test_micro_batching_does_not_change_the_gradient(tiny_model_dir, hf_model, samples, layout):
    """One micro-batch per mini-batch and many give the same grad norm and the same weights."""
    for s in samples:
        s.advantage = float(len(s.response_ids) % 3 - 1)
    results = []
    for budget in (48, 512):
        settings = engine_settings(zero_stage=2, micro_token_budget=budget, mini_batch_size=6,
                                   lr=1e-3, grad_clip=1e6, layout=layout)
        engine = ActorEngine(str(tiny_model_dir), settings, loss_settings(kl_coef=0.0, entropy_coef=0.01,
                                                                          loss_agg="seq-mean"))
        for s, lp in zip(samples, engine.compute_log_probs(samples)):
            s.logp_old = lp
        metrics = engine.update(samples)
        results.append((metrics, dict(engine.named_weights())))
    (m_small, w_small), (m_big, w_big) = results
    assert m_small["perf/micro_batches"] > m_big["perf/micro_batches"]
    if layout != "shared":  # shared bins may split to save padding (batching.cheapest_partition)
        assert m_big["perf/micro_batches"] == 1.0
    rel, atol = metric_rel(hf_model.config, samples), close(hf_model.config, samples)["atol"]
    assert m_small["actor/grad_norm"] == pytest.approx(m_big["actor/grad_norm"], rel=rel)
    assert m_small["loss/policy"] == pytest.approx(m_big["loss/policy"], rel=rel, abs=atol)
    before = hf_model.state_dict()
    for name in w_big:
        assert relative_update_gap(w_small[name], w_big[name], before[name]) < UPDATE_GAP, name


def test_shared_layout_gives_the_padded_layout_losses_and_gradients(tiny_model_dir, hf_model, samples):
    """The shared layout computes each prompt once; the loss, gradient and update must not change."""
    samples = with_repeated_prompts(samples, copies=3)
    for k, s in enumerate(samples):
        s.advantage = float(k % 3 - 1)
    results = {}
    for layout in ("padded", "shared"):
        settings = engine_settings(zero_stage=0, micro_token_budget=96, mini_batch_size=8, lr=1e-3, grad_clip=1e6,
                                   layout=layout)
        engine = ActorEngine(str(tiny_model_dir), settings, loss_settings(kl_coef=0.05, entropy_coef=0.01))
        assert engine.layout == layout
        old = engine.compute_log_probs(samples)
        for s, lp in zip(samples, old):
            s.logp_old, s.logp_ref = lp, lp - 0.1
        metrics = engine.update(samples)
        results[layout] = (metrics, dict(engine.named_weights()), old)
    (m_pad, w_pad, old_pad), (m_shared, w_shared, old_shared) = results["padded"], results["shared"]
    assert m_shared["perf/pad_share"] < m_pad["perf/pad_share"] or m_shared["perf/micro_batches"] < m_pad["perf/micro_batches"]
    rel, tol = metric_rel(hf_model.config, samples), close(hf_model.config, samples)
    for key in ("loss/policy", "loss/kl", "loss/entropy", "actor/grad_norm"):
        assert m_shared[key] == pytest.approx(m_pad[key], rel=rel, abs=tol["atol"]), key
    for a, b in zip(old_pad, old_shared):
        torch.testing.assert_close(a, b, **tol)
    before = hf_model.state_dict()
    for name in w_pad:
        assert relative_update_gap(w_shared[name], w_pad[name], before[name]) < UPDATE_GAP, name


def test_named_weights_are_the_full_hf_weights(actor):
    names = [name for name, _ in actor.named_weights()]
    assert len(names) == len(set(names))
    assert names[-1] == "lm_head.weight"  # tied to the embedding; sent too (vLLM-CPU keeps its own copy)
    assert [n for n, _ in actor.named_weights(include_tied=False)] == names[:-1]
    weights = dict(actor.named_weights())
    state = actor.hf_module().state_dict()
    assert set(weights) == set(state)
    for name, tensor in weights.items():
        assert tensor.device.type == "cpu"
        torch.testing.assert_close(tensor, state[name])


def test_critic_learns_the_returns(tiny_model_dir, samples):
    critic = CriticEngine(str(tiny_model_dir), engine_settings(zero_stage=2, micro_token_budget=48,
                                                              mini_batch_size=6, lr=1e-3), loss_settings())
    values = critic.compute_values(samples)
    assert [v.shape[0] for v in values] == [len(s.response_ids) for s in samples]
    module = critic.engine.module
    for layout in ("padded", "packed"):  # both read the value where the policy predicts each token
        critic.layout = layout
        for s, v in zip(samples, critic.compute_values(samples)):
            with torch.no_grad():
                plain = module(input_ids=torch.tensor([s.prompt_ids + s.response_ids])).logits[0, :, 0]
            p = len(s.prompt_ids)
            # values are a linear head on the last hidden state: the forward chain on values of size |plain|
            atol = reorder_tolerance(torch.float32, plain.abs().max().item(), forward_terms(module.config, len(plain)))
            torch.testing.assert_close(v, plain[p - 1:p - 1 + len(s.response_ids)], atol=atol, rtol=0)
    for s, v in zip(samples, values):
        s.returns = torch.full_like(v, 1.0)
        s.values_old = None
    first = critic.update(samples)["critic/value_loss"]
    for _ in range(4):
        last = critic.update(samples)["critic/value_loss"]
    assert last < first


def test_zero3_gathers_full_weights_and_matches_hf(tiny_model_dir, hf_model, samples):
    """ZeRO-3 (one rank): loaded partitioned, yet log-probs and gathered weights are the model's."""
    settings = engine_settings(zero_stage=3, micro_token_budget=48, mini_batch_size=6)
    zero3 = ActorEngine(str(tiny_model_dir), settings, loss_settings(kl_coef=0.0))
    assert any(p.numel() == 0 for p in zero3.hf_module().parameters())  # really partitioned
    for sample, logp in zip(samples, zero3.compute_log_probs(samples)):
        torch.testing.assert_close(logp, hf_reference(hf_model, sample)[0], **close(hf_model.config, samples))
    state = hf_model.state_dict()
    for name, tensor in zero3.named_weights():
        torch.testing.assert_close(tensor, state[name])
    # the partitioning hook is gone after loading: other models in this process load whole
    again = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert all(p.numel() > 0 for p in again.parameters())


def test_host_syncs_of_a_pass_do_not_grow_with_its_micro_batches(actor, samples, monkeypatch):
    """One log-prob pass and one update (one optimizer step) wait for the device a fixed number of times, not
    once per micro-batch or per sample: metrics stay on the device until the update ends, log-probs until the
    pass ends, and the kept rows are found at collate time (support.dispatch.HostSyncs counts the waits)."""
    from torch.utils._python_dispatch import _disable_current_modes

    import gigpo.trainer.engines as engines
    from support.dispatch import HostSyncs

    laid_out = engines.collate

    def on_the_host(*args, **kwargs):  # collate builds CPU tensors before they move: no device to wait for
        with _disable_current_modes():
            return laid_out(*args, **kwargs)

    monkeypatch.setattr(engines, "collate", on_the_host)
    for sample, logp in zip(samples, actor.compute_log_probs(samples)):
        sample.logp_old, sample.advantage = logp, 1.0
    counts = {}
    for budget in (48, 96):  # 4 and 2 micro-batches of the same samples
        monkeypatch.setattr(actor, "settings", dataclasses.replace(SETTINGS, micro_token_budget=budget,
                                                                   mini_batch_size=len(samples)))
        with HostSyncs() as logprob_pass:
            actor.compute_log_probs(samples)
        with HostSyncs() as update_pass:
            metrics = actor.update(samples)
        counts[metrics["perf/micro_batches"]] = (logprob_pass.calls, update_pass.calls)
    assert sorted(counts) == [2.0, 4.0]
    assert counts[2.0][0] == counts[4.0][0] == ["_to_copy"]  # the pass's log-probs, copied once
    # per optimizer step: the loss's and the gradients' finiteness, the grad norm, DeepSpeed's overflow checks,
    # the metrics read once; and per sample the host-side check of its inputs (check_finite)
    assert len(counts[2.0][1]) == len(counts[4.0][1]), counts


def test_non_finite_inputs_and_losses_stop_before_the_weights_change(actor, samples):
    for s, lp in zip(samples, actor.compute_log_probs(samples)):
        s.logp_old, s.advantage = lp, 1.0
    samples[2].advantage = float("nan")
    with pytest.raises(NonFiniteError, match="sample 2 has a NaN/inf advantage"):
        actor.update(samples)
    samples[2].advantage = 1.0
    for s in samples:  # every mini-batch goes wrong in its first step: ratio exp(huge) = inf
        s.logp_old = torch.full_like(s.logp_old, -1e30)
    before = dict(actor.named_weights())
    # A > 0: the clipped term keeps the loss finite, but the gradient is inf * 0 = NaN
    with pytest.raises(NonFiniteError, match="gradients are NaN/inf in optimizer step 1"):
        actor.update(samples)
    for s in samples:
        s.advantage = -1.0  # A < 0: min(-inf, ...) makes the loss itself infinite
    with pytest.raises(NonFiniteError, match="loss is NaN/inf in optimizer step 1"):
        actor.update(samples)
    for name, tensor in actor.named_weights():
        assert torch.equal(tensor, before[name]), f"{name} changed despite the non-finite loss"


def test_action_metrics_are_the_means_over_action_tokens_alone(tiny_model_dir, hf_model, samples):
    """loss/action_* against a hand computation from plain HF forwards: one mini-batch, so every figure is
    taken before the step; KL to a perturbed reference and a shifted logp_old make them non-trivial."""
    settings = dataclasses.replace(SETTINGS, mini_batch_size=None, mini_batches=1, lr=1e-6)
    fresh = ActorEngine(str(tiny_model_dir), settings, loss_settings(kl_coef=0.01, entropy_coef=0.0))
    g = torch.Generator().manual_seed(0)
    want = {"tokens": 0.0, "entropy": 0.0, "kl": 0.0, "approx_kl_old": 0.0, "clip_frac": 0.0}
    for k, s in enumerate(samples):
        logp, ent = hf_reference(hf_model, s)
        s.logp_old = logp + 0.3 * torch.randn(logp.shape, generator=g)
        s.logp_ref = logp + 0.2 * torch.randn(logp.shape, generator=g)
        s.advantage = 1.0 if k % 2 else -1.0
        s.action_mask = (torch.arange(len(s.response_ids)) % 3 == 1).float()  # every third token "spells" the move
        m = s.action_mask
        ratio = torch.exp(logp - s.logp_old)
        clipped = ratio.clamp(0.8, 1.2) * s.advantage < ratio * s.advantage
        want["tokens"] += float(m.sum())
        want["entropy"] += float((ent * m).sum())
        want["kl"] += float(((torch.exp(s.logp_ref - logp) - (s.logp_ref - logp) - 1) * m).sum())
        want["approx_kl_old"] += float(((s.logp_old - logp) * m).sum())
        want["clip_frac"] += float((clipped.float() * m).sum())
    metrics = fresh.update(samples)
    for key in ("entropy", "kl", "approx_kl_old", "clip_frac"):
        # sums of ~20 float32 terms of size ~1-7: allow a few hundred float32 epsilons of the total
        assert metrics[f"loss/action_{key}"] == pytest.approx(want[key] / want["tokens"], rel=1e-4, abs=1e-5), key
    assert metrics["loss/action_kl"] != pytest.approx(metrics["loss/kl"], rel=1e-3)  # a real subset of the tokens


def test_a_bf16_actor_on_a_cpu_without_native_bf16_multiplies_in_fp32_kernels(tiny_model_dir, samples):
    """Log-probs, forward and backward of a bf16 update: no bf16 matmul reaches a kernel on a CPU that would
    emulate it (gigpo.infra.cpu_bf16); on one with native bf16 they all stay bf16."""
    from gigpo.infra.dtypes import cpu_has_fast_bf16
    from support.dispatch import OperandDtypes

    actor = ActorEngine(str(tiny_model_dir), dataclasses.replace(SETTINGS, dtype="bf16"), loss_settings(kl_coef=0.0))
    spy = OperandDtypes()
    with spy:
        for s, lp in zip(samples, actor.compute_log_probs(samples)):
            s.logp_old, s.advantage = lp, 1.0 if len(s.response_ids) % 2 else -1.0
        stats = actor.update(samples)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    kernels = spy.widened_calls()
    native = cpu_has_fast_bf16()
    assert any((torch.bfloat16 if native else torch.float32) in d for d in kernels)
    if not native:
        assert not any(torch.bfloat16 in d for d in kernels), [d for d in kernels if torch.bfloat16 in d][:5]

