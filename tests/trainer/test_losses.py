"""Loss functions against hand computations on small tensors."""
from __future__ import annotations

import math

import pytest
import torch

from gigpo.trainer.losses import aggregate, entropy_from_logits, kl_k3, policy_loss, value_loss
from support.tolerance import approx, eps, reorder_tolerance

# fp32 hand cases: each value goes through a handful of rounded ops (exp, log, products, a clip, a mean);
# `approx(value, terms=...)` allows the rounding of that many ops at the value's size (support.tolerance).


def test_policy_loss_clips_high_side_for_positive_advantage():
    # ratio 1.5 with A=+2: unclipped 3.0, clipped to 1+0.28=1.28 -> 2.56; loss = -min = -2.56
    logp_old = torch.tensor([[0.0]])
    logp = torch.tensor([[math.log(1.5)]])
    loss, clipped = policy_loss(logp, logp_old, torch.tensor([[2.0]]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == approx(-2.56, terms=4)
    assert clipped.item() == 1.0


def test_policy_loss_clips_low_side_for_negative_advantage():
    # ratio 0.5 with A=-1: unclipped -0.5, clipped ratio 1-0.2=0.8 -> -0.8; min is -0.8; loss 0.8
    loss, clipped = policy_loss(torch.tensor([[math.log(0.5)]]), torch.tensor([[0.0]]), torch.tensor([[-1.0]]),
                                clip_low=0.2, clip_high=0.28)
    assert loss.item() == approx(0.8, terms=4)
    assert clipped.item() == 1.0


def test_policy_loss_does_not_clip_in_the_pessimistic_direction():
    # ratio 0.5 with A=+1: unclipped 0.5 < clipped 0.8, so the unclipped term (and its gradient) is kept
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    loss, clipped = policy_loss(logp, torch.tensor([[0.0]]), torch.tensor([[1.0]]), 0.2, 0.2)
    assert loss.item() == approx(-0.5, terms=4)
    assert clipped.item() == 0.0
    loss.sum().backward()
    assert logp.grad.item() == approx(-0.5, terms=4)  # d(-r)/dlogp = -r


def test_clipped_token_has_no_gradient():
    logp = torch.tensor([[math.log(1.5)]], requires_grad=True)
    loss, _ = policy_loss(logp, torch.tensor([[0.0]]), torch.tensor([[1.0]]), 0.2, 0.2)
    loss.sum().backward()
    assert logp.grad.item() == 0.0


def test_kl_k3_matches_formula_and_is_zero_at_equality():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.0, -1.0, -1.5])
    # d = ref - logp = [0, 1, -1]; k3 = exp(d) - d - 1
    expected = torch.tensor([0.0, math.e - 1 - 1, math.exp(-1) + 1 - 1])
    assert kl_k3(logp, ref).tolist() == approx(expected.tolist(), terms=4, magnitude=math.e)
    assert torch.all(kl_k3(logp, ref) >= 0)


def test_kl_k3_is_unbiased_estimate_of_kl():
    # E_{x~p}[k3] = KL(p||q) for categorical p, q
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    per_x = kl_k3(p.log(), q.log())
    assert (p * per_x).sum().item() == approx((p * (p / q).log()).sum().item(), terms=3 * 4)  # 3 outcomes


def test_entropy_from_logits():
    uniform = torch.zeros(2, 4)
    assert entropy_from_logits(uniform).tolist() == approx([math.log(4)] * 2, terms=2 * 4)  # softmax, log, sum of 4
    peaked = torch.tensor([[0.0, math.log(3.0)]])  # probs 0.25, 0.75
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(peaked).item() == approx(h, terms=2 * 2)


def test_aggregation_modes_differ_as_computed_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0, 99.0], [10.0, 99.0, 99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # token-mean: (1+2+3+10)/4 = 4; seq-mean: (2 + 10)/2 = 6
    assert aggregate(values, mask, "token-mean").item() == approx(4.0, terms=values.numel(), magnitude=16.0)  # the masked sum
    assert aggregate(values, mask, "seq-mean").item() == approx(6.0, terms=values.numel(), magnitude=16.0)


def test_aggregation_over_micro_batches_sums_to_the_whole():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    for mode, denominator in (("token-mean", 6.0), ("seq-mean", 3.0)):
        whole = aggregate(values, mask, mode)
        parts = aggregate(values[:2], mask[:2], mode, denominator) + aggregate(values[2:], mask[2:], mode, denominator)
        assert parts.item() == approx(whole.item(), terms=values.numel(), magnitude=21.0)  # sums to 21


def test_aggregation_rejects_unknown_mode_and_shape_mismatch():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mask shape"):
        aggregate(torch.ones(1, 2), torch.ones(1, 3), "token-mean")


def test_value_loss_plain_and_clipped():
    v, old, ret = torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([0.0])
    assert value_loss(v, old, ret).item() == approx(2.0, terms=3)  # 0.5 * 2^2
    # clipped value 1.2: (1.2-0)^2=1.44 < 4, pessimistic max keeps 4
    assert value_loss(v, old, ret, clip=0.2).item() == approx(2.0, terms=4)
    # return 3: unclipped (2-3)^2=1, clipped (1.2-3)^2=3.24 -> 0.5*3.24
    assert value_loss(v, old, torch.tensor([3.0]), clip=0.2).item() == approx(1.62, terms=4)


def _plain_logp_entropy(logits, targets, temperature):
    x = logits.float() / temperature
    return torch.log_softmax(x, -1).gather(-1, targets[:, None]).squeeze(-1), entropy_from_logits(x)


def _saved_bytes(fn):
    """Bytes autograd keeps for backward while `fn` runs (what sets training memory): the storages its
    saved tensors hold, each counted once (a view saved twice keeps nothing more alive)."""
    storages: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(storages.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_logp_entropy_equals_the_plain_form_with_less_memory(dtype):
    from gigpo.trainer.losses import token_logp_entropy

    gen = torch.Generator().manual_seed(0)
    n, vocab, temperature = 70, 3000, 0.7
    base = (torch.randn(n, vocab, generator=gen) * 3).to(dtype)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    weights = torch.randn(n, generator=gen)

    def run(f):
        logits = base.clone().requires_grad_(True)
        (logp, ent), saved = _saved_bytes(lambda: f(logits))
        ((logp * weights).sum() + (ent * weights).sum()).backward()
        return logp.detach(), ent.detach(), logits.grad, saved

    plain = run(lambda x: _plain_logp_entropy(x, targets, temperature))
    chunked = run(lambda x: token_logp_entropy(x, targets, temperature, with_entropy=True, chunk_rows=16))
    # fp32 maths either way: entropies sum `vocab` terms p * x of size <= max|x| / temperature (log-probs and
    # gradients fewer); bf16 gradients are then rounded to bf16 once on each side (rtol 2 eps)
    x_max = base.float().abs().max().item() / temperature
    tol = dict(atol=reorder_tolerance(torch.float32, x_max, vocab), rtol=0 if dtype == torch.float32 else 2 * eps(dtype))
    for a, b in zip(plain[:3], chunked[:3]):
        torch.testing.assert_close(b.float(), a.float(), **tol)
    full_fp32 = n * vocab * 4
    assert plain[3] >= 2 * full_fp32            # the plain form keeps several (N, V) fp32 tensors
    assert chunked[3] <= 1.1 * base.numel() * base.element_size()  # chunked: the logits themselves
    logp_only, _ = token_logp_entropy(base, targets, temperature)
    torch.testing.assert_close(logp_only, plain[0], **tol)
    # without entropies backward takes its own branch: its gradient is the plain log-softmax's too
    plain_logp = run(lambda x: (_plain_logp_entropy(x, targets, temperature)[0], torch.zeros(n)))
    chunked_logp = run(lambda x: (token_logp_entropy(x, targets, temperature, chunk_rows=16)[0], torch.zeros(n)))
    torch.testing.assert_close(chunked_logp[2].float(), plain_logp[2].float(), **tol)


def test_logp_entropy_reads_shared_rows_once_and_matches_the_plain_form():
    """Targets that share a logits row (a prompt's end predicting every response's first token) and rows
    no target reads: log-probs, entropies and gradients must equal the plain per-target form."""
    from gigpo.trainer.losses import token_logp_entropy

    gen = torch.Generator().manual_seed(1)
    base = torch.randn(9, 50, generator=gen) * 2
    rows = torch.tensor([0, 0, 0, 2, 3, 3, 8, 5])  # rows 1, 4, 6 and 7 are read by no target
    targets = torch.tensor([4, 4, 17, 0, 49, 3, 21, 4])
    weights = torch.randn(8, generator=gen)

    def run(f):
        logits = base.clone().requires_grad_(True)
        logp, ent = f(logits)
        ((logp * weights).sum() + (ent * weights).sum()).backward()
        return logp.detach(), ent.detach(), logits.grad

    plain = run(lambda x: _plain_logp_entropy(x[rows], targets, 0.9))
    shared = run(lambda x: token_logp_entropy(x, targets, 0.9, with_entropy=True, chunk_rows=4, rows=rows))
    for a, b in zip(plain, shared):
        # 50 logits of size <= max|x| / 0.9 summed in fp32, in rows of another shape
        torch.testing.assert_close(b, a, atol=reorder_tolerance(torch.float32, base.abs().max().item() / 0.9, 50), rtol=0)
    assert shared[2][[1, 4, 6, 7]].abs().sum() == 0
    with pytest.raises(ValueError, match="rows"):
        token_logp_entropy(base, targets, rows=rows[:3])
    with pytest.raises(ValueError, match="targets"):  # 2-D targets and no rows: named, not an AttributeError
        token_logp_entropy(base, targets[None])
