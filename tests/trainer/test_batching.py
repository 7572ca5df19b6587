"""Packing samples into micro-batches by token budget."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.trainer.batching import (TokenBudgetError, TrainSample, bucket_by_length, check_token_budget,
                                    cheapest_partition, collate, pack_by_budget, plan_micro_batches, unpad)


def _sample(p: int, r: int, base: int = 10) -> TrainSample:
    return TrainSample(list(range(base, base + p)), list(range(base + 100, base + 100 + r)), advantage=0.5)


@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(50, 120))
@settings(max_examples=60, deadline=None)
def test_bins_respect_budget_and_cover_every_sample_once(lengths, budget):
    bins = pack_by_budget(lengths, budget)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= budget for b in bins)
    # first fit leaves at most one bin half full or less (else its items would have fitted earlier)
    assert sum(1 for b in bins if 2 * sum(lengths[i] for i in b) <= budget) <= 1


@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(50, 100), st.integers(1, 4),
       st.sampled_from(["packed", "padded"]))
@settings(max_examples=60, deadline=None)
def test_plan_gives_every_rank_the_same_count(lengths, budget, world, layout):
    plan = plan_micro_batches(lengths, budget, world, layout)
    assert len(plan) == world and len({len(r) for r in plan}) == 1
    real = sorted(i for rank in plan for b, dummy in rank if not dummy for i in b)
    assert real == list(range(len(lengths)))


def test_plan_adds_dummy_when_nothing_can_be_split():
    plan = plan_micro_batches([40], budget=50, world_size=2)
    flat = [b for rank in plan for b in rank]
    assert sorted(d for _, d in flat) == [False, True]


def test_oversized_sample_is_named_with_numbers():
    with pytest.raises(TokenBudgetError, match=r"sample 1 has 70 tokens.*micro_token_budget=64"):
        pack_by_budget([10, 70], 64)
    with pytest.raises(TokenBudgetError, match=r"2048 \+ .*512 = 2560.*micro_token_budget=2000"):
        check_token_budget(2048, 512, 2000)
    check_token_budget(2048, 512, 2560)


def test_packed_layout_points_at_the_logits_that_predict_each_response_token():
    a, b = _sample(3, 2, base=10), _sample(2, 3, base=50)
    mb = collate([a, b], [0, 1], layout="packed")
    assert mb.input_ids.tolist() == [a.prompt_ids + a.response_ids + b.prompt_ids + b.response_ids]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3, 4]]
    assert mb.attention_mask is None
    # position t predicts token t+1: a's responses at 3,4 are predicted at 2,3; b's at 7,8,9 at 6,7,8
    assert mb.logits_to_keep.tolist() == [2, 3, 6, 7, 8]
    assert mb.predict_index.tolist() == [[2, 3, 0], [6, 7, 8]]
    assert mb.kept_index.tolist() == [[0, 1, 0], [2, 3, 4]]
    assert mb.kept_targets.tolist() == [[110, 111, 0], [150, 151, 152]]
    assert mb.mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert mb.num_tokens == mb.num_real_tokens == 10
    assert mb.fields["advantage"].tolist() == [[0.5, 0.5, 0.0], [0.5, 0.5, 0.5]]
    assert "logp_old" not in mb.fields
    flat_ids = mb.input_ids.reshape(-1)
    assert (flat_ids[mb.predict_index + 1] * mb.mask.long()).tolist() == [[110, 111, 0], [150, 151, 152]]


def test_padded_layout_left_pads_so_responses_end_together():
    a, b = _sample(3, 2, base=10), _sample(2, 1, base=50)
    mb = collate([a, b], [0, 1], layout="padded")
    assert mb.input_ids.tolist() == [a.prompt_ids + a.response_ids, [0, 0] + b.prompt_ids + b.response_ids]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]]
    # keep the last max_R + 1 = 3 columns (2, 3, 4) of each row; column 4 predicts nothing
    assert mb.logits_to_keep == 3
    assert mb.kept_targets.tolist() == [[110, 111], [150, 0]]
    assert mb.kept_index.tolist() == [[0, 1], [4, 0]]
    flat_ids = mb.input_ids.reshape(-1)
    assert (flat_ids[mb.predict_index + 1] * mb.mask.long()).tolist() == [[110, 111], [150, 0]]
    assert (mb.num_real_tokens, mb.num_tokens) == (8, 10)
    assert [t.tolist() for t in unpad(mb.fields["advantage"], mb.mask)] == [[0.5, 0.5], [0.5]]


def test_shared_layout_lays_a_prompt_out_once_and_masks_responses_from_each_other():
    a = _sample(3, 2, base=10)
    b = TrainSample(list(a.prompt_ids), [120, 121, 122])  # same prompt, another response
    c = _sample(2, 1, base=50)
    mb = collate([a, b, c], [0, 1, 2], layout="shared")
    # row 0: prompt 10 11 12, then a's response, then b's; row 1: c left-padded to the prompts' end
    assert mb.input_ids.tolist() == [[10, 11, 12, 110, 111, 120, 121, 122], [0, 50, 51, 150, 0, 0, 0, 0]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 4, 5], [0, 0, 1, 2, 0, 0, 0, 0]]
    allowed = mb.attention_mask[:, 0].int()  # boolean until MicroBatch.to makes it additive
    assert allowed[0, 5].tolist() == [1, 1, 1, 0, 0, 1, 0, 0]  # b's first token: prompt and itself, not a's
    assert allowed[0, 4].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert allowed[1, 3].tolist() == [0, 1, 1, 1, 0, 0, 0, 0]  # no padding in view
    # prompts end at column 2: kept columns 2..7 (6 per row); column 2 predicts both a's and b's first token
    assert mb.logits_to_keep == 6
    assert mb.kept_index.tolist() == [[0, 1, 0], [0, 3, 4], [6, 0, 0]]
    # the distinct kept positions read, each once (column 2 predicts a's and b's first token), found at collate time
    assert mb.kept_used.tolist() == [0, 1, 3, 4, 6]
    assert mb.kept_used[mb.kept_slot].tolist() == mb.kept_index.reshape(-1).tolist()
    assert mb.kept_targets.tolist() == [[110, 111, 0], [120, 121, 122], [150, 0, 0]]
    flat_ids = mb.input_ids.reshape(-1)
    assert (flat_ids[mb.predict_index + 1][:, 1:] * mb.mask[:, 1:].long()).tolist() == [[111, 0], [121, 122], [0, 0]]
    assert mb.predict_index[:, 0].tolist() == [2, 2, 8 + 2]
    assert (mb.num_real_tokens, mb.num_tokens) == (3 + 2 + 3 + 2 + 1, 16)


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 12)), min_size=1, max_size=40), st.integers(60, 160),
       st.integers(1, 3))
@settings(max_examples=25, deadline=None)
def test_shared_plan_fits_the_budget_and_covers_every_sample(shapes, budget, world):
    prompts = [list(range(10 + 7 * p)) for p, _ in shapes]  # five distinct prompts of 10-38 tokens
    samples = [TrainSample(prompt, list(range(r))) for prompt, (_, r) in zip(prompts, shapes)]
    lengths = [len(s) for s in samples]
    plan = plan_micro_batches(lengths, budget, world, "shared", prompts)
    assert len({len(r) for r in plan}) == 1
    real = sorted(i for rank in plan for b, dummy in rank if not dummy for i in b)
    assert real == list(range(len(samples)))
    for rank in plan:
        for indices, _ in rank:
            mb = collate(samples, indices, layout="shared")
            assert mb.num_tokens <= budget
            assert mb.num_real_tokens <= sum(lengths[i] for i in indices)


def _all_partitions(n: int):
    """Every way to cut 0..n-1 into contiguous runs (2^(n-1) of them)."""
    for mask in range(1 << max(n - 1, 0)):
        cuts = [0] + [k + 1 for k in range(n - 1) if mask >> k & 1] + [n]
        yield list(zip(cuts[:-1], cuts[1:]))


@given(st.lists(st.integers(1, 30), min_size=1, max_size=9), st.integers(30, 90), st.integers(0, 40))
@settings(max_examples=80, deadline=None)
def test_cheapest_partition_is_the_exhaustive_optimum(widths, budget, overhead):
    """Rows of these widths (sorted widest first, as bucket_shared sorts them) padded to each run's widest:
    the dynamic programme's cost must equal the best of all partitions, and its runs must be allowed."""
    widths = sorted(widths, reverse=True)
    size = lambda a, b: (b - a) * max(widths[a:b]) if (b - a) * max(widths[a:b]) <= budget else None  # noqa: E731
    runs = cheapest_partition(len(widths), size, overhead)
    assert [a for a, _ in runs][1:] == [b for _, b in runs][:-1] and runs[0][0] == 0 and runs[-1][1] == len(widths)
    cost = lambda part: sum(size(a, b) + overhead for a, b in part)  # noqa: E731
    allowed = [p for p in _all_partitions(len(widths)) if all(size(a, b) is not None for a, b in p)]
    assert all(size(a, b) is not None for a, b in runs)
    assert cost(runs) == min(cost(p) for p in allowed)


def test_shared_bins_do_not_pad_narrow_rows_to_wide_ones():
    """Sokoban's shape: one prompt length, rows of 1 to 13 responses of 8 tokens. The greedy fill put 26%
    padding into such micro-batches; bins of near-equal rows must keep it small."""
    gen = torch.Generator().manual_seed(0)
    samples = []
    for prompt in range(60):
        for _ in range(int(torch.randint(1, 14, (1,), generator=gen))):
            samples.append(TrainSample([1000 + prompt] + list(range(1, 37)), list(range(200, 208)), advantage=1.0))
    plan = plan_micro_batches([len(s) for s in samples], 2048, 1, "shared", [s.prompt_ids for s in samples])
    padded = real = 0
    for indices, _ in plan[0]:
        mb = collate(samples, indices, layout="shared")
        padded, real = padded + mb.num_tokens, real + mb.num_real_tokens
    assert sorted(i for indices, _ in plan[0] for i in indices) == list(range(len(samples)))
    assert 1 - real / padded < 0.08


@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(50, 120))
@settings(max_examples=60, deadline=None)
def test_padded_buckets_fit_the_budget_with_padding(lengths, budget):
    bins = bucket_by_length(lengths, budget)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(len(b) * max(lengths[i] for i in b) <= budget for b in bins)


def test_sample_validation_names_the_field():
    with pytest.raises(ValueError, match="logp_old has shape"):
        TrainSample([1, 2], [3, 4], logp_old=torch.zeros(3))
    with pytest.raises(ValueError, match="response_ids is empty"):
        TrainSample([1, 2], [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_shared_mask_becomes_finite_additive_mask_in_the_models_dtype(dtype):
    """float32's lowest value is -inf in bfloat16, and CUDA's fused attention turns an all -inf key block
    into NaN (seen on an H200): the mask must be made in the compute dtype, with that dtype's own minimum."""
    a = _sample(3, 2, base=10)
    b = TrainSample(list(a.prompt_ids), [120, 121, 122])
    mb = collate([a, b, _sample(2, 1, base=50)], [0, 1, 2], layout="shared")
    assert mb.attention_mask.dtype == torch.bool
    moved = mb.to("cpu", dtype)
    assert moved.attention_mask.dtype == dtype
    assert torch.isfinite(moved.attention_mask).all()
    assert ((moved.attention_mask == 0) == mb.attention_mask).all()
    assert (moved.attention_mask[~mb.attention_mask] == torch.finfo(dtype).min).all()
    assert torch.tensor(torch.finfo(torch.float32).min).to(torch.bfloat16).isinf()  # the trap itself
