"""algorithm.rollout_correction (issue 41): weights, truncation, step masks and the k3 KL by hand on a small
batch, both loss forms (trainer's old log-probs, or the generator's), the real actor update, the config, and a
2-iteration `gigpo train` that logs the mismatch."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from support.run import metrics_of, train

from gigpo.trainer.rollout_correction import (Correction, correction_means, correction_terms, corrected_policy_loss,
                                              resolve_correction)

# Two steps, padded to 3 tokens: step 0 has 3 response tokens, step 1 has 2 (its third entry is padding).
TRAINER = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.4, 0.0]])
BEHAVIOUR = torch.tensor([[-1.2, -1.5, -1.0], [-0.3, -0.2, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
# log-ratios trainer - behaviour: step 0: 0.2, 1.0, -1.0 (sum 0.2, mean 0.2/3); step 1: 0.0, -0.2 (sum -0.2, mean -0.1)


def correction(token: bool = True, mask=None, low: float = 0.5, high: float = 2.0) -> Correction:
    return Correction(token=token, mask=mask, cap=2.0, mask_low=low, mask_high=high)


def k3(d: float) -> float:
    """k3 of KL(generator || trainer) for one token with log-ratio d = logp_trainer - logp_behaviour."""
    return math.exp(d) - d - 1.0


def test_weights_truncation_masks_and_k3_by_hand() -> None:
    weights, keep, sums = correction_terms(TRAINER, BEHAVIOUR, MASK, correction(mask="seq", low=0.9, high=1.1))
    # w = min(e^d, 2): e^0.2, e^1 = 2.72 cut to 2, e^-1; then 1 and e^-0.2 (padding: 1, never read)
    w_hand = [[math.exp(0.2), 2.0, math.exp(-1.0)], [1.0, math.exp(-0.2), 1.0]]
    assert weights.tolist() == [pytest.approx(row, abs=1e-6) for row in w_hand]
    # sequence ratios e^0.2 = 1.22 (outside [0.9, 1.1]: masked) and e^-0.2 = 0.82 (masked too)
    assert keep.tolist() == [0.0, 0.0]
    _, keep, _ = correction_terms(TRAINER, BEHAVIOUR, MASK, correction(mask="seq", low=0.8, high=1.25))
    assert keep.tolist() == [1.0, 1.0]
    # geometric means e^(0.2/3) = 1.069 and e^-0.1 = 0.905: [0.95, 1.1] keeps step 0 and masks step 1
    _, keep, _ = correction_terms(TRAINER, BEHAVIOUR, MASK, correction(mask="geo", low=0.95, high=1.1))
    assert keep.tolist() == [1.0, 0.0]
    means = correction_means(sums)
    d = [0.2, 1.0, -1.0, 0.0, -0.2]  # the five response tokens
    assert means["correction/weight_mean"] == pytest.approx(sum(min(math.exp(x), 2.0) for x in d) / 5, abs=1e-6)
    assert means["correction/truncated_share"] == pytest.approx(1 / 5)
    assert means["correction/masked_share"] == pytest.approx(2 / 2)
    assert means["correction/kl_k3"] == pytest.approx(sum(k3(x) for x in d) / 5, abs=1e-6)
    # no mask, no token weights: every weight 1 and nothing masked, but the mismatch is still measured
    weights, keep, sums = correction_terms(TRAINER, BEHAVIOUR, MASK, correction(token=False))
    assert weights.eq(1.0).all() and keep.tolist() == [1.0, 1.0]
    assert correction_means(sums)["correction/masked_share"] == 0.0
    assert correction_means(sums)["correction/kl_k3"] == pytest.approx(means["correction/kl_k3"])


def test_loss_with_the_trainers_old_logprobs_is_weighted_and_masked_ppo() -> None:
    logp = torch.tensor([[-0.9, -0.5, -2.5], [-0.3, -0.4, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, 2.0], [1.0, 1.0, 1.0]])
    loss, clipped, _ = corrected_policy_loss(logp, TRAINER, BEHAVIOUR, adv, MASK, 0.2, 0.2,
                                             correction(mask="geo", low=0.95, high=1.1), old_is_behaviour=False)
    # step 0: r = e^0.1, 1, e^-0.5 (below 0.8 with A > 0: the smaller, unclipped r*A is taken), times w;
    # step 1 is masked (geometric mean 0.905 < 0.95): no loss, no gradient
    w = [math.exp(0.2), 2.0, math.exp(-1.0)]
    r = [math.exp(0.1), 1.0, math.exp(-0.5)]
    assert loss[0].tolist() == pytest.approx([-r[0] * w[0], r[1] * w[1], -2.0 * r[2] * w[2]], abs=1e-6)
    assert loss[1].tolist() == [0.0, 0.0, 0.0]
    assert clipped[0].tolist() == [0.0, 0.0, 0.0]
    loss.sum().backward()  # weights and masks are constants: d loss / d logp = -A * r * w * keep
    assert logp.grad[0].tolist() == pytest.approx([-r[0] * w[0], r[1] * w[1], -2.0 * r[2] * w[2]], abs=1e-6)
    assert logp.grad[1].tolist() == [0.0, 0.0, 0.0]


def test_loss_with_the_generators_old_logprobs_caps_the_ratio_and_never_weights_it_twice() -> None:
    # trainer.old_logprobs=generator: logp_old IS the behaviour; the live log-probs are the trainer's side
    logp = TRAINER.clone().requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 2.0], [1.0, -1.0, 1.0]])
    loss, clipped, sums = corrected_policy_loss(logp, BEHAVIOUR, BEHAVIOUR, adv, MASK, 0.2, 0.2, correction(),
                                                old_is_behaviour=True)
    # r = e^d. Token (0,0): e^0.2 > 1.2 with A = 1: clipped at 1.2, no gradient. (0,1): e^1 = 2.72 with
    # A = -1: plain PPO takes -r*A = 2.72 (unbounded as r grows); the cap makes it C*|A| = 2, no gradient.
    # (0,2): e^-1 with A = 2: -2 e^-1. Step 1: e^0 and e^-0.2 inside the clip: -r*A.
    hand = [[-1.2, 2.0, -2.0 * math.exp(-1.0)], [-1.0, math.exp(-0.2), -1.0]]
    assert loss[0].tolist() == pytest.approx(hand[0], abs=1e-6)
    assert loss[1, :2].tolist() == pytest.approx(hand[1][:2], abs=1e-6)
    assert clipped[0].tolist() == [1.0, 1.0, 0.0] and clipped[1, :2].tolist() == [0.0, 0.0]  # the cap counts as a clip
    loss.mul(MASK).sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.0, -2.0 * math.exp(-1.0)], abs=1e-6)
    # the mismatch metrics read the live (trainer's) log-probs against the generator's
    assert correction_means(sums)["correction/truncated_share"] == pytest.approx(1 / 5)


def test_modes_resolve_and_bad_values_name_the_key() -> None:
    from gigpo.config import RecipeError, load_config
    from gigpo.trainer.rollout_correction import correction_from_config

    recipe = "recipes/sokoban_tiny.yaml"
    assert correction_from_config(load_config(recipe)) is None  # sync: off, as before the setting existed
    assert correction_from_config(load_config(recipe, ["rollout.mode=async"])) == Correction(True, None, 2.0, 0.5, 2.0)
    on = correction_from_config(load_config(recipe, ["algorithm.rollout_correction=token+geo-mask",
                                                     "rollout.importance_cap=3", "algorithm.correction_mask_low=0.99",
                                                     "algorithm.correction_mask_high=1.01"]))
    assert on == Correction(True, "geo", 3.0, 0.99, 1.01)
    assert resolve_correction("seq-mask", False, 2.0, 0.5, 2.0) == Correction(False, "seq", 2.0, 0.5, 2.0)
    assert resolve_correction("none", True, 2.0, 0.5, 2.0) is None
    for override, message in (("algorithm.rollout_correction=tis", "algorithm.rollout_correction"),
                              ("algorithm.correction_mask_low=1.5", "algorithm.correction_mask_low"),
                              ("algorithm.correction_mask_high=0.5", "algorithm.correction_mask_high"),
                              ("rollout.importance_cap=0.5", "rollout.importance_cap")):
        with pytest.raises(RecipeError, match=message):
            load_config(recipe, [override])


def test_the_actor_update_applies_weights_and_masks(tiny_model_dir) -> None:
    from trainer_helpers import engine_settings, loss_settings, make_samples

    from gigpo.trainer.engines import ActorEngine

    on = correction(mask="seq", low=0.5, high=2.0)
    actor = ActorEngine(str(tiny_model_dir), engine_settings(mini_batch_size=64),
                        loss_settings(kl_coef=0.0, entropy_coef=0.0, correction=on))
    samples = make_samples()
    for sample, logp in zip(samples, actor.compute_log_probs(samples)):
        sample.logp_old, sample.advantage = logp, 1.0
    # per-token log-ratio 1.0 / len: each token's weight e^(1/R) passes the cap and the sequence ratio is e (masked);
    # log-ratio 0.5 / len: sequence ratio e^0.5 = 1.65 (kept)
    for total, masked in ((1.0, True), (0.5, False)):
        for sample in samples:
            sample.logp_behaviour = sample.logp_old - total / len(sample.response_ids)
        metrics = actor.update(samples)  # one optimizer step at ratio 1: loss = -A * w * keep per token
        assert metrics["correction/masked_share"] == (1.0 if masked else 0.0)
        assert (metrics["actor/grad_norm"] == 0.0) == masked  # masked: no gradient, weights unchanged
        if not masked:
            tokens = sum(len(s.response_ids) for s in samples)
            w = sum(len(s.response_ids) * math.exp(0.5 / len(s.response_ids)) for s in samples) / tokens
            assert metrics["correction/weight_mean"] == pytest.approx(w, abs=1e-6)
            assert metrics["loss/policy"] == pytest.approx(-w, abs=1e-5)
        for sample, logp in zip(samples, actor.compute_log_probs(samples)):  # the next round's ratio is 1 again
            sample.logp_old = logp


def test_a_sync_run_with_the_correction_and_generator_logprobs_logs_the_mismatch(tmp_path: Path) -> None:
    run = tmp_path / "corrected"
    # sync mode, old log-probs from the generator (no recompute), token weights and a geometric-mean mask; 4
    # optimizer steps an iteration, so later mini-batches train a policy that has moved
    train(run, "algorithm.rollout_correction=token+geo-mask", "trainer.old_logprobs=generator", "trainer.iterations=2",
          "trainer.mini_batch_size=null", "trainer.mini_batches=4")
    records = metrics_of(run)
    assert [r["iteration"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        # hf backend in fp32: the generator holds the trainer's weights, so they agree to rounding. The figures
        # come from the first mini-batch alone, before the update moves the live policy away from the generator
        assert r["correction/weight_mean"] == pytest.approx(1.0, abs=1e-4)
        assert r["correction/truncated_share"] == r["correction/masked_share"] == 0.0
        assert 0.0 <= r["correction/kl_k3"] < 1e-6 and math.isfinite(r["loss/policy"])
        assert r["actor/optimizer_steps"] > 1  # later mini-batches ran on a moved policy, and were not measured
