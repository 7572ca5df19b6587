"""Supervised warm-up: it teaches the expert's moves, and an identical warm-up is built once and reused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from support.models import mean_answer_logprob
from support.tolerance import forward_terms, reorder_tolerance

from gigpo.envs.demos import collect_demonstrations
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import PromptBuilder
from gigpo.trainer.sft_warmup import (AnswerWeights, batch_loss_backward, cached_warmup, micro_batches, response_ids,
                                      supervised_warmup, warmup_cache_key, weighted_answer_loss)


@pytest.mark.parametrize("dtype,action_share", [
    ("fp32", None),
    ("bf16", None),
    ("fp32", 0.5)])
def test_supervised_warmup_teaches_the_expert_moves(tiny_model_dir, tmp_path, dtype, action_share, capsys):
    # bf16: autocast, as recipes with model.dtype bf16 warm up; action_share: the balanced answer loss
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pool = EnvPool("gigpo/Sokoban-v0", env_kwargs={"size": 5}, max_steps=8, workers=1)
    try:
        demos = collect_demonstrations(pool, list(range(40)), explore=0.3, seed=0)
    finally:
        pool.close()
    build = PromptBuilder(tokenizer, 8, 0, "{observation}").batch_token_ids
    pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(build([d.view for d in demos]), demos)]
    held_out, train = pairs[:20], pairs[20:]
    before = mean_answer_logprob(tiny_model_dir, held_out)
    out = supervised_warmup(str(tiny_model_dir), tmp_path, train, steps=40, lr=1e-3, batch_size=32, seed=0, progress=False,
                            dtype=dtype, action_share=action_share)
    after = mean_answer_logprob(out, held_out)
    assert out == tmp_path / "hf" and not (tmp_path / "hf.tmp").exists()
    # from near-uniform over a 1024-token vocabulary (about -7 per token) to a model that writes the format
    assert before < -5.0 and after > -1.5, (before, after)
    # no bar (progress=False): a line every tenth of the steps, so a compare run's log shows the warm-up
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warm-up: step")]
    assert [line.split()[2] for line in lines] == [f"{k}/40" for k in range(4, 41, 4)]


def test_identical_warmups_are_built_once(tmp_path):
    builds: list[Path] = []

    def build(out_dir: Path) -> Path:
        builds.append(out_dir)
        (out_dir / "hf").mkdir(parents=True)
        (out_dir / "hf" / "config.json").write_text(json.dumps({"build": len(builds)}))
        return out_dir / "hf"

    key = warmup_cache_key({"model": "tiny", "sft_steps": 150, "seed": 0})
    first = cached_warmup(tmp_path / "cache", key, tmp_path / "run1" / "warmup", build)
    second = cached_warmup(tmp_path / "cache", key, tmp_path / "run2" / "warmup", build)
    assert len(builds) == 1 and json.loads((second / "config.json").read_text()) == {"build": 1}
    assert first != second and (first / "config.json").is_file()

    other = warmup_cache_key({"model": "tiny", "sft_steps": 151, "seed": 0})
    assert other != key
    cached_warmup(tmp_path / "cache", other, tmp_path / "run3" / "warmup", build)
    assert len(builds) == 2
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([key, other])  # no staging left over


def test_answer_weights_put_the_share_on_the_action_tokens(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    answer = response_ids(tokenizer, "left")  # '<' 'action' '>' 'left' '</' 'action' '>' end-of-turn
    weights = AnswerWeights(tokenizer, 0.75).answer(answer)
    word = [k for k, tok in enumerate(answer) if tokenizer.decode([tok]) == "left"]
    assert len(word) == 1 and len(answer) == 8
    assert weights[word[0]] == pytest.approx(0.75)
    assert all(w == pytest.approx(0.25 / 7) for k, w in enumerate(weights) if k != word[0])
    # an answer with no action inside tags has nothing to balance: a plain mean over its tokens
    plain = tokenizer("hello there", add_special_tokens=False)["input_ids"]
    assert AnswerWeights(tokenizer, 0.75).answer(plain) == pytest.approx([1 / len(plain)] * len(plain))


def test_weighted_answer_loss_matches_a_hand_computation():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5)
    labels = torch.tensor([[-100, -100, 3, 1], [-100, 2, 4, -100]])
    weights = torch.tensor([[0.0, 0.0, 0.8, 0.2], [0.0, 0.5, 0.5, 0.0]])
    logp = torch.log_softmax(logits, -1)
    # logits at position t predict the label at t + 1
    row0 = -(0.8 * logp[0, 1, 3] + 0.2 * logp[0, 2, 1])
    row1 = -(0.5 * logp[1, 0, 2] + 0.5 * logp[1, 1, 4])
    expected = (row0 + row1) / 2
    got = weighted_answer_loss(logits, labels, weights)
    # float32 log-softmax of O(1) logits: a few ulps of the O(1) result
    assert torch.isclose(got, expected, rtol=0, atol=16 * torch.finfo(torch.float32).eps), (got, expected)


@pytest.mark.parametrize("dtype,keys_differ", [("bf16", True), ("fp32", False)])
def test_a_warmup_widened_on_an_avx2_cpu_is_not_reused_where_bf16_is_native(monkeypatch, dtype, keys_differ):
    """The warm-up cache outlives the machine (a checkout can move to another CPU): a bf16 warm-up built with
    widened matmuls is not bit-identical to a native one, so the two get different cache keys; fp32 shares one.
    The CPU cannot be changed in a test, so the machine check (gigpo.infra.cpu_bf16._widen_here) is swapped."""
    import gigpo.infra.cpu_bf16 as cpu_bf16
    from gigpo.config import load_config
    from gigpo.trainer.sft_warm_start import sft_warmup_settings
    from support.run import REPO

    config = load_config(REPO / "recipes" / "sokoban_smollm2_g8.yaml", [f"model.dtype={dtype}"])
    keys = []
    for widened in (True, False):
        monkeypatch.setattr(cpu_bf16, "_widen_here", lambda d, w=widened: w and d == "bf16")
        keys.append(warmup_cache_key(sft_warmup_settings(config, "smollm2", seed=0)))
    assert (keys[0] != keys[1]) == keys_differ


def test_micro_batches_cut_sorted_rows_to_the_budget():
    lengths = [300, 20, 500, 40, 280, 30]
    runs = micro_batches(lengths, budget=600)
    assert runs == [[1, 5, 3], [4, 0], [2]]  # 3 x 40, 2 x 300, 1 x 500: each run's rows x longest <= 600
    assert micro_batches([900, 10], budget=600) == [[1], [0]]  # a row over the budget runs alone


@pytest.mark.parametrize("action_share", [None, 0.5])
def test_micro_batched_step_has_the_one_forward_gradient(tiny_model_dir, action_share):
    """Long prompts (ALFWorld) run as sorted micro-batches with the head on answer positions only: same loss
    and gradient as the whole batch in one padded forward, up to float summation order."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    actions = ["go to drawer 1", "open fridge 1", "look", "take apple 2 from countertop 1"]
    batch = [(torch.randint(3, 1000, (int(n),), generator=generator).tolist(), response_ids(tokenizer, actions[k % 4]))
             for k, n in enumerate(torch.randint(20, 300, (12,), generator=generator))]
    weights_of = AnswerWeights(tokenizer, action_share) if action_share is not None else None
    results = []
    for budget in (None, 700):  # None: one forward, as before; 700: several micro-batches
        model.zero_grad()
        loss = batch_loss_backward(model, batch, tokenizer.pad_token_id, weights_of, budget, torch.device("cpu"))
        results.append((loss, torch.cat([p.grad.flatten() for p in model.parameters()])))
    assert len(micro_batches([len(p) + len(r) for p, r in batch], 700)) > 3
    (loss_one, grad_one), (loss_micro, grad_micro) = results
    # two summation orders of a forward, a backward (as long again) and the sum over every answer token
    longest = max(len(p) + len(r) for p, r in batch)
    terms = 2 * forward_terms(model.config, longest) + sum(len(r) for _, r in batch)
    assert abs(loss_one - loss_micro) <= reorder_tolerance(torch.float32, float(loss_one), terms), (loss_one, loss_micro)
    gap = (grad_one - grad_micro).abs().max()
    assert gap <= reorder_tolerance(torch.float32, float(grad_one.abs().max()), terms), gap


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from Linux /proc")
@pytest.mark.parametrize("trim_every_s, release", [(0.0, True), (None, False), (3600.0, False)])
def test_a_due_trim_hands_freed_heap_memory_back(tiny_model_dir, tmp_path, trim_every_s, release):
    # Freed activations stay in glibc's heap unless trimmed, and a real model's warm-up then grows to twice its
    # live size (SmolLM2 on ALFWorld: 10.5 GB, 5.1 GB live). Here the first step's callback frees ~0.3 GiB of
    # heap-sized blocks (64 KiB: under glibc's mmap threshold); a trim due after the second step must give them
    # back. The controls (never, and not yet due after an hour's interval) show that it is the trim that does.
    from gigpo.trainer.memory import rss_gib

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pairs = [(tokenizer("go left")["input_ids"], response_ids(tokenizer, "left"))] * 4
    rss: dict[str, float] = {}
    pinned: list[torch.Tensor] = []

    def after_step(step: int, model) -> None:
        if step == 1:
            held = [torch.ones(64 * 1024 // 4) for _ in range(300 * 16)]
            # a block above them keeps the freed ones inside the heap, where glibc gives nothing back unprompted
            pinned.append(torch.ones(64 * 1024 // 4))
            del held
            rss["freed"] = rss_gib()
        else:
            rss["next step"] = rss_gib()

    supervised_warmup(str(tiny_model_dir), tmp_path, pairs, steps=2, lr=1e-3, batch_size=2, seed=0, progress=False,
                      after_step=after_step, trim_every_s=trim_every_s)
    returned = rss["freed"] - rss["next step"]
    if release:
        assert returned > 0.2, rss
    else:  # the control: without the trim glibc keeps the pages, so the test above measures the trim
        assert returned < 0.1, rss
