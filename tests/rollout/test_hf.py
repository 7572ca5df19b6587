"""The HF reference backend: contract of completions, log-probs, seeds, stops, weight updates."""
from __future__ import annotations

import pytest
import torch

from gigpo.rollout.hf_backend import HFGenerator, InverseCdfSampler, sampling_processors
from gigpo.rollout.types import SamplingSettings
from gigpo.rollout.verify import trainer_logprobs

from .conftest import GREEDY, load_trainer_model, perturb, sample_prompts


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    return HFGenerator(str(tiny_model_dir), dtype="fp32")


def test_left_padded_batch_equals_one_by_one(hf):
    prompts = sample_prompts(5)
    batched = hf.generate(prompts, GREEDY)
    single = [hf.generate([p], GREEDY)[0] for p in prompts]
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert [c.prompt_index for c in batched] == list(range(5))


def test_logprobs_are_the_models_raw_logprobs_of_sampled_tokens(hf, tiny_model_dir):
    model = load_trainer_model(tiny_model_dir)
    prompts = sample_prompts(3, seed=1)
    for c in hf.generate(prompts, SamplingSettings(temperature=1.3, top_p=0.9, max_new_tokens=12, seed=5)):
        ref = trainer_logprobs(model, prompts[c.prompt_index], c.token_ids)
        assert len(c.logprobs) == len(c.token_ids)
        torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_seed_reproduces_and_n_groups_by_prompt(hf):
    prompts = sample_prompts(3, seed=2)
    settings = SamplingSettings(temperature=1.0, max_new_tokens=10, n=4, seed=11)
    a, b = hf.generate(prompts, settings), hf.generate(prompts, settings)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.prompt_index for c in a] == [i for i in range(3) for _ in range(4)]
    other = hf.generate(prompts, SamplingSettings(temperature=1.0, max_new_tokens=10, n=4, seed=12))
    assert [c.token_ids for c in a] != [c.token_ids for c in other]


def test_finish_reasons_eos_and_length(hf, tiny_model_dir):
    """A model whose LM head always prefers <|im_end|> stops at once; a 1-token budget ends by length."""
    gen = HFGenerator(str(tiny_model_dir), dtype="fp32")
    eos = gen.tokenizer.convert_tokens_to_ids("<|im_end|>")
    model = load_trainer_model(tiny_model_dir)
    with torch.no_grad():
        model.lm_head.weight[eos] += 50 * model.lm_head.weight.abs().max()  # tied: also the embedding
    named = [(n, p) for n, p in model.named_parameters()]
    gen.update_weights(named, version=1)
    [c] = gen.generate([[10, 11, 12]], SamplingSettings(temperature=0, max_new_tokens=8))
    assert c.token_ids == [eos] and c.finish_reason == "stop" and c.weight_version == 1
    [c] = hf.generate([[10, 11, 12]], SamplingSettings(temperature=0, max_new_tokens=1))
    assert len(c.token_ids) == 1 and c.finish_reason == "length"


def test_update_weights_changes_outputs_and_checks_names(tiny_model_dir):
    gen = HFGenerator(str(tiny_model_dir), dtype="fp32")
    model = load_trainer_model(tiny_model_dir)
    prompts = sample_prompts(4, seed=3)
    before = gen.generate(prompts, GREEDY)
    perturb(model, seed=1)
    gen.update_weights(model.named_parameters(), version=1)
    after = gen.generate(prompts, GREEDY)
    assert [c.token_ids for c in before] != [c.token_ids for c in after]
    assert {c.weight_version for c in after} == {1}
    with pytest.raises(ValueError, match="version 1 must be greater"):
        gen.update_weights(model.named_parameters(), version=1)
    with pytest.raises(ValueError, match="does not have"):
        gen.update_weights([("model.bogus.weight", torch.zeros(2))] + list(model.named_parameters()), version=2)


def test_bad_prompts_are_named(hf):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        hf.generate([[1, 2], []], GREEDY)
    with pytest.raises(ValueError, match=r"prompt 0 has token ids outside the vocabulary"):
        hf.generate([[1, 10**6]], GREEDY)
    with pytest.raises(ValueError, match="temperature"):
        SamplingSettings(temperature=-1)


def test_shared_prefill_gives_the_outputs_of_a_full_prefill(tiny_model_dir):
    """Repeated prompts are prefilled once and their cache copied to every row: the greedy answers and
    the log-probs must be those of prefilling every row, with left padding and n > 1 too."""
    shared = HFGenerator(str(tiny_model_dir), dtype="fp32", share_prefill=True)
    full = HFGenerator(str(tiny_model_dir), dtype="fp32", share_prefill=False)
    base = sample_prompts(4, seed=3)
    prompts = [base[0], base[1], base[0], base[2], base[0], base[1], base[3][:2]]  # repeats, lengths differ
    for settings in (GREEDY, SamplingSettings(temperature=0.0, max_new_tokens=10, n=3)):
        a, b = shared.generate(prompts, settings), full.generate(prompts, settings)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert [c.prompt_index for c in a] == [c.prompt_index for c in b]
        for x, y in zip(a, b):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)
    sampled = SamplingSettings(temperature=1.0, max_new_tokens=10, n=2, seed=7)  # same seed: same draws
    assert [c.token_ids for c in shared.generate(prompts, sampled)] == [c.token_ids for c in full.generate(prompts, sampled)]


def _count_prefilled(gen: HFGenerator) -> list[int]:
    """Record how many prefixes each of `gen`'s prefill batches ran (instrumentation, not a stand-in)."""
    counts: list[int] = []
    run = gen._prefill

    def counting(prefixes):
        counts.append(len(prefixes))
        return run(prefixes)

    gen._prefill = counting
    return counts


def test_prompt_cache_across_calls_gives_the_outputs_of_a_full_prefill(tiny_model_dir):
    """A later call reuses the KV of prompts an earlier call ran (and runs only the new ones): answers
    and log-probs must still be those of prefilling every row, whatever the padding of either call."""
    cached = HFGenerator(str(tiny_model_dir), dtype="fp32")
    full = HFGenerator(str(tiny_model_dir), dtype="fp32", share_prefill=False)
    counts = _count_prefilled(cached)
    base = sample_prompts(6, seed=8)
    calls = [[base[0], base[1], base[0]],                      # 2 new prefixes
             [base[1], base[2], base[0], base[3][:3], base[2]],  # 2 new; the longest prompt now pads differently
             [base[0][:-1] + [7], base[4], base[1]]]           # a new last token on a kept prefix: 1 new
    for prompts in calls:
        a, b = cached.generate(prompts, GREEDY), full.generate(prompts, GREEDY)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(a, b):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)
    assert counts == [2, 2, 1]
    assert len(cached.prompt_cache) == 5


def test_prompt_cache_is_dropped_when_the_weights_change(tiny_model_dir):
    """After a weight update every kept prompt KV is stale: the next call must prefill again and answer
    as a generator that never kept anything."""
    cached = HFGenerator(str(tiny_model_dir), dtype="fp32")
    full = HFGenerator(str(tiny_model_dir), dtype="fp32", share_prefill=False)
    prompts = sample_prompts(5, seed=9)
    cached.generate(prompts, GREEDY)
    model = load_trainer_model(tiny_model_dir)
    perturb(model, seed=4, scale=0.2)
    for gen in (cached, full):
        gen.update_weights(model.named_parameters(), version=1)
    assert len(cached.prompt_cache) == 0
    a, b = cached.generate(prompts, GREEDY), full.generate(prompts, GREEDY)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for x, y in zip(a, b):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)


def test_prompt_cache_keeps_to_its_byte_budget_and_drops_the_least_recently_used():
    from gigpo.rollout.prompt_cache import PromptKVStore

    entry = lambda n: [(torch.zeros(2, n, 4), torch.zeros(2, n, 4))]  # noqa: E731  2*n*4 floats x 2 = 64n bytes
    store = PromptKVStore(max_bytes=64 * 10)
    store.put((1,), entry(4))
    store.put((2,), entry(4))
    assert store.get((1,)) is not None  # (2,) is now the least recently used
    store.put((3,), entry(4))
    assert store.get((2,)) is None and store.get((1,)) is not None and store.get((3,)) is not None
    assert store.bytes == 64 * 8 <= store.max_bytes
    store.put((4,), entry(11))  # larger than the whole budget: not kept, nothing evicted for it
    assert store.get((4,)) is None and len(store) == 2
    store.clear()
    assert len(store) == 0 and store.bytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        PromptKVStore(-1)


def test_sampler_draws_from_the_tempered_top_p_distribution():
    """The sampling processors (temperature, top-p, inverse-CDF draw) must give each token its share of
    the tempered, top-p-truncated distribution, and never a token top-p removed."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0, -3.0])
    temperature, top_p, rows = 0.8, 0.9, 40_000
    probs = torch.softmax(logits / temperature, -1)
    keep = probs.cumsum(-1) - probs < top_p  # sorted descending already: the smallest set reaching top_p
    expected = torch.where(keep, probs, 0.0) / probs[keep].sum()
    torch.manual_seed(0)
    scores = logits.repeat(rows, 1)
    for processor in sampling_processors(temperature, top_p):
        scores = processor(torch.zeros(rows, 1, dtype=torch.long), scores)
    assert bool(((scores == 0).sum(-1) == 1).all()) and bool(torch.isinf(scores).sum(-1).eq(5).all())
    counts = torch.bincount(scores.argmax(-1), minlength=6).double()
    assert counts[~keep].sum() == 0
    sigma = (rows * expected * (1 - expected)).sqrt()
    assert bool(((counts - rows * expected).abs() <= 5 * sigma + 1e-9).all()), (counts / rows, expected)


def test_sampler_never_draws_a_zero_probability_token_when_the_uniform_rounds_up(monkeypatch):
    """A uniform number times the total can round up to the total itself; the draw must then be the last
    token of positive probability, not one past the end or one top-p removed (a fault only a patched
    random number can cause)."""
    scores = torch.tensor([[0.0, 1.0, 2.0, float("-inf"), float("-inf")]])
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, **kw))
    out = InverseCdfSampler()(torch.zeros(1, 1, dtype=torch.long), scores)
    assert out.argmax(-1).item() == 2 and out[0, 2] == 0 and torch.isinf(out[0, [0, 1, 3, 4]]).all()


def test_tiny_top_p_samples_the_greedy_answer(hf):
    """With top-p below every token's probability only the most likely token is left: through generate,
    sampling must then give exactly the greedy answers (the processors are wired into generate)."""
    prompts = sample_prompts(4, seed=4)
    greedy = hf.generate(prompts, GREEDY)
    sampled = hf.generate(prompts, SamplingSettings(temperature=1.0, top_p=1e-6, max_new_tokens=16, seed=3))
    assert [c.token_ids for c in sampled] == [c.token_ids for c in greedy]
