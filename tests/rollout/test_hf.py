"""The HF reference backend: contract of completions, log-probs, seeds, stops, weight updates."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from gigpo.rollout.hf_backend import HFGenerator, inverse_cdf_draw, sampling_warpers
from gigpo.rollout.types import SamplingSettings
from gigpo.rollout.weight_sync.verify import trainer_logprobs

from support.models import load_trainer_model, perturb
from support.tolerance import logprob_tolerance

from .conftest import GREEDY, sample_prompts


def assert_same_logprobs(model_dir, prompt: list[int], got: list[float], want) -> None:
    """Two kernels' log-probs of the same tokens agree within the rounding bound of the model's forward."""
    from transformers import AutoConfig

    want = torch.as_tensor(want)
    atol = logprob_tolerance(AutoConfig.from_pretrained(model_dir), len(prompt) + len(got),
                             largest=want.abs().max().item())
    torch.testing.assert_close(torch.tensor(got), want, atol=atol, rtol=0)


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
        assert_same_logprobs(tiny_model_dir, prompts[c.prompt_index], c.logprobs, ref)


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
            assert_same_logprobs(tiny_model_dir, prompts[x.prompt_index], x.logprobs, y.logprobs)
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
            assert_same_logprobs(tiny_model_dir, prompts[x.prompt_index], x.logprobs, y.logprobs)
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
        assert_same_logprobs(tiny_model_dir, prompts[x.prompt_index], x.logprobs, y.logprobs)


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
    """The warpers (temperature, top-p) and the inverse-CDF draw must give each token its share of the
    tempered, top-p-truncated distribution, and never a token top-p removed."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0, -3.0])
    temperature, top_p, rows = 0.8, 0.9, 40_000
    probs = torch.softmax(logits / temperature, -1)
    keep = probs.cumsum(-1) - probs < top_p  # sorted descending already: the smallest set reaching top_p
    expected = torch.where(keep, probs, 0.0) / probs[keep].sum()
    torch.manual_seed(0)
    scores = logits.repeat(rows, 1)
    for warp in sampling_warpers(temperature, top_p):
        scores = warp(None, scores)
    counts = torch.bincount(inverse_cdf_draw(scores, torch.rand(rows, dtype=torch.float64)), minlength=6).double()
    assert counts[~keep].sum() == 0
    sigma = (rows * expected * (1 - expected)).sqrt()
    assert bool(((counts - rows * expected).abs() <= 5 * sigma + 1e-9).all()), (counts / rows, expected)


def test_sampler_never_draws_a_zero_probability_token_when_the_uniform_rounds_up():
    """A uniform number times the total can round up to the total itself; the draw must then be the last
    token of positive probability, not one past the end or one top-p removed."""
    scores = torch.tensor([[0.0, 1.0, 2.0, float("-inf"), float("-inf")]])
    nearly_one = torch.tensor([1.0 - 2.0**-53], dtype=torch.float64)
    assert inverse_cdf_draw(scores, nearly_one).tolist() == [2]
    assert inverse_cdf_draw(scores, torch.ones(1, dtype=torch.float64)).tolist() == [2]
    assert inverse_cdf_draw(scores, torch.zeros(1, dtype=torch.float64)).tolist() == [0]


def test_decode_samples_what_generate_samples_with_the_same_draws(hf):
    """The decode loop drops finished rows; transformers' generate keeps them. With the same uniform
    numbers (row r's token t uses number [t, r]) both must sample the same tokens, greedy and sampled."""
    from transformers import LogitsProcessorList

    prompts = sample_prompts(6, seed=12)
    width = max(map(len, prompts))
    ids = torch.tensor([[hf.pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    for free in (SamplingSettings(temperature=0, max_new_tokens=14),
                 SamplingSettings(temperature=1.4, top_p=0.95, max_new_tokens=14, seed=3)):
        stop_id = hf.generate(prompts, free)[0].token_ids[3]  # an extra end token, so some rows end early
        ends = sorted(hf.eos_ids | {stop_id})
        settings = dataclasses.replace(free, stop_token_ids=(stop_id,))
        ours = hf.generate(prompts, settings)
        assert any(len(c.token_ids) < 14 for c in ours) and any(len(c.token_ids) == 14 for c in ours), \
            [len(c.token_ids) for c in ours]
        processors = []
        if settings.temperature > 0:
            torch.manual_seed(settings.seed)
            uniforms = torch.rand((14, len(prompts)), dtype=torch.float64)
            warpers = sampling_warpers(settings.temperature, settings.top_p)

            def draw(input_ids, scores):
                for warp in warpers:
                    scores = warp(None, scores)
                token = inverse_cdf_draw(scores, uniforms[input_ids.shape[1] - width])
                return torch.full_like(scores, float("-inf")).scatter_(-1, token[:, None], 0.0)
            processors = [draw]
        out = hf.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=14, do_sample=False, temperature=None,
                                top_p=None, top_k=None, eos_token_id=ends, pad_token_id=hf.pad_id,
                                logits_processor=LogitsProcessorList(processors))
        theirs = [row[width:] for row in out.tolist()]
        for c, row in zip(ours, theirs):
            assert c.token_ids == row[:len(c.token_ids)]
            assert c.finish_reason == ("stop" if c.token_ids[-1] in ends else "length")


def test_stop_strings_end_a_row_where_the_text_first_contains_one(hf):
    """A stop string ends its row at the token that completes it (kept, reason "stop"); other rows run on."""
    prompts = sample_prompts(3, seed=13)
    free = hf.generate(prompts, SamplingSettings(temperature=0, max_new_tokens=10))
    text = hf.tokenizer.decode(free[0].token_ids[:4])
    stop = text[-2:]  # ends inside the greedy answer's 4th token, or exactly at its end
    first = next(k for k in range(1, 11) if stop in hf.tokenizer.decode(free[0].token_ids[:k]))
    out = hf.generate(prompts, SamplingSettings(temperature=0, max_new_tokens=10, stop=(stop,)))
    assert out[0].token_ids == free[0].token_ids[:first] and out[0].finish_reason == "stop"
    for c, f in zip(out[1:], free[1:]):
        cut = next((k for k in range(1, len(f.token_ids) + 1) if stop in hf.tokenizer.decode(f.token_ids[:k])), None)
        assert c.token_ids == (f.token_ids[:cut] if cut else f.token_ids)


def test_tiny_top_p_samples_the_greedy_answer(hf):
    """With top-p below every token's probability only the most likely token is left: through generate,
    sampling must then give exactly the greedy answers (the processors are wired into generate)."""
    prompts = sample_prompts(4, seed=4)
    greedy = hf.generate(prompts, GREEDY)
    sampled = hf.generate(prompts, SamplingSettings(temperature=1.0, top_p=1e-6, max_new_tokens=16, seed=3))
    assert [c.token_ids for c in sampled] == [c.token_ids for c in greedy]


def test_a_rollout_reuses_prompts_across_turns_and_leaves_no_cache_behind(tiny_model_dir):
    """Played through `rollout` (real Sokoban pool): the kept prompt KV must spare prefills of prompts an
    earlier turn ran, give the episodes a full prefill gives, and be gone when the rollout ends."""
    from gigpo.config import load_config
    from gigpo.infra.seeds import train_seeds
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.setup import build_pool, build_prompt_fn, sampling

    config = load_config("recipes/sokoban_tiny.yaml", ["env.num_groups=2", "env.group_size=4", "env.max_steps=5"])
    cached = HFGenerator(str(tiny_model_dir), dtype="fp32")
    full = HFGenerator(str(tiny_model_dir), dtype="fp32", share_prefill=False)
    prefilled = _count_prefilled(cached)
    distinct: list[int] = []
    generate = cached.generate

    def recording(prompts, settings):
        distinct.append(len({tuple(p[:-1]) for p in prompts}))
        return generate(prompts, settings)

    cached.generate = recording
    prompt_fn = build_prompt_fn(config, cached.tokenizer)
    played = {}
    with build_pool(config) as pool:
        for name, gen in (("cached", cached), ("full", full)):
            played[name] = rollout(pool, gen, prompt_fn, train_seeds(config, 1), config.env.group_size,
                                   sampling(config, evaluation=False, seed=1), config.rollout.max_prompt_tokens)
    assert played["cached"].steps.prompt_ids == played["full"].steps.prompt_ids
    assert played["cached"].steps.response_ids == played["full"].steps.response_ids
    assert len(distinct) > 1 and sum(prefilled) < sum(distinct), (prefilled, distinct)
    assert len(cached.prompt_cache) == 0 and cached.prompt_cache.bytes == 0


def test_bf16_generation_on_a_cpu_without_native_bf16_multiplies_in_fp32_kernels(tiny_model_dir):
    """Sampling a bf16 model: every matmul reaches its kernel in fp32 where the CPU would emulate bf16
    (gigpo.infra.cpu_bf16), in bf16 where it is native; either way the completions keep the contract."""
    from gigpo.infra.dtypes import cpu_has_fast_bf16
    from support.dispatch import OperandDtypes

    gen = HFGenerator(str(tiny_model_dir), dtype="bf16")
    spy = OperandDtypes()
    with spy:
        out = gen.generate(sample_prompts(4, seed=5), SamplingSettings(temperature=1.0, max_new_tokens=6, seed=0))
    assert len(out) == 4 and all(1 <= len(c.token_ids) <= 6 for c in out)
    kernels = spy.widened_calls()
    native = cpu_has_fast_bf16()
    assert any((torch.bfloat16 if native else torch.float32) in d for d in kernels)
    if not native:
        assert not any(torch.bfloat16 in d for d in kernels), [d for d in kernels if torch.bfloat16 in d][:5]
