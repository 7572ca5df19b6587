"""Mini-batch order: every sample once per epoch; by prompt, a prompt's samples stay together."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.trainer.engines import minibatches


@given(st.lists(st.integers(0, 9), min_size=1, max_size=80), st.integers(1, 20), st.integers(1, 3), st.booleans())
@settings(max_examples=60, deadline=None)
def test_each_epoch_partitions_the_samples_into_mini_batches_of_the_size(prompt_of, size, epochs, by_prompt):
    prompts = [[p, p + 1] for p in prompt_of]
    batches = list(minibatches(prompts, size, epochs, seed=3, by_prompt=by_prompt))
    per_epoch = -(-len(prompts) // size)
    assert len(batches) == per_epoch * epochs
    for e in range(epochs):
        epoch = batches[e * per_epoch:(e + 1) * per_epoch]
        assert sorted(i for b in epoch for i in b) == list(range(len(prompts)))
        assert all(len(b) == size for b in epoch[:-1])
    if by_prompt:  # a prompt's samples are consecutive in the epoch's order: at most 2 mini-batches each
        for p in set(prompt_of):
            for e in range(epochs):
                holding = [k for k, b in enumerate(batches[e * per_epoch:(e + 1) * per_epoch])
                           if any(prompt_of[i] == p for i in b)]
                count = sum(1 for x in prompt_of if x == p)
                assert len(holding) <= 1 + -(-count // size)
                assert holding == list(range(holding[0], holding[-1] + 1))


def test_orders_depend_on_the_seed_and_by_prompt_groups_what_single_shuffles_scatter():
    prompts = [[k % 8] for k in range(64)]  # 8 prompts x 8 samples
    by_prompt = list(minibatches(prompts, 8, 1, seed=0, by_prompt=True))
    assert all(len({prompts[i][0] for i in b}) == 1 for b in by_prompt)
    scattered = list(minibatches(prompts, 8, 1, seed=0, by_prompt=False))
    assert sum(len({prompts[i][0] for i in b}) for b in scattered) > 16
    assert list(minibatches(prompts, 8, 1, seed=1, by_prompt=True)) != by_prompt


@given(st.integers(1, 300), st.integers(1, 16), st.integers(1, 3), st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_mini_batch_count_fixes_the_optimizer_steps_whatever_the_sample_count(n, count, epochs, by_prompt):
    prompts = [[k % 7] for k in range(n)]
    batches = list(minibatches(prompts, None, epochs, seed=5, by_prompt=by_prompt, count=count))
    per_epoch = min(count, n)
    assert len(batches) == per_epoch * epochs
    for e in range(epochs):
        epoch = batches[e * per_epoch:(e + 1) * per_epoch]
        assert sorted(i for b in epoch for i in b) == list(range(n))
        sizes = [len(b) for b in epoch]
        assert max(sizes) - min(sizes) <= 1  # nearly equal: no tiny last mini-batch with a noisy gradient


def test_single_shuffles_mix_many_states_into_each_of_few_mini_batches():
    # 16 states x 8 rows: with 4 mini-batches of 32, a row-level shuffle puts most states in every
    # mini-batch, while by-prompt cutting puts each state in at most two
    prompts = [[k % 16] for k in range(128)]
    mixed = list(minibatches(prompts, None, 1, seed=0, by_prompt=False, count=4))
    grouped = list(minibatches(prompts, None, 1, seed=0, by_prompt=True, count=4))
    assert min(len({prompts[i][0] for i in b}) for b in mixed) >= 10
    assert max(len({prompts[i][0] for i in b}) for b in grouped) <= 5


@given(st.lists(st.integers(0, 9), max_size=30), st.integers(1, 12), st.integers(1, 3), st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_ranks_parts_are_exactly_the_agreed_count_and_cover_its_samples(prompt_of, parts, epochs, by_prompt):
    """With several ranks every rank must take the same optimizer steps: a rank cuts its own samples (maybe
    fewer than the steps, maybe none) into exactly `parts` per epoch, some empty, each sample once."""
    prompts = [[p, p + 1] for p in prompt_of]
    batches = list(minibatches(prompts, None, epochs, seed=3, by_prompt=by_prompt, parts=parts))
    assert len(batches) == parts * epochs
    for e in range(epochs):
        epoch = batches[e * parts:(e + 1) * parts]
        assert sorted(i for b in epoch for i in b) == list(range(len(prompts)))
        assert max(map(len, epoch)) - min(map(len, epoch)) <= 1  # near-equal parts of the shuffled order
