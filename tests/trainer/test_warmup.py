"""Supervised warm-up: it teaches the expert's moves, and an identical warm-up is built once and reused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gigpo.envs.demos import collect_demonstrations
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import PromptBuilder
from gigpo.trainer.warmup import cached_warmup, response_ids, supervised_warmup, warmup_cache_key


def _mean_logprob(model_dir: Path, pairs: list[tuple[list[int], list[int]]]) -> float:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for prompt, response in pairs:
            ids = torch.tensor([prompt + response])
            logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
            targets = ids[0, 1:]
            picked = logp.gather(-1, targets[:, None])[:, 0][len(prompt) - 1:]
            total += float(picked.sum())
            count += len(response)
    return total / count


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])  # bf16: autocast, as recipes with model.dtype bf16 warm up
def test_supervised_warmup_teaches_the_expert_moves(tiny_model_dir, tmp_path, dtype, capsys):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pool = EnvPool("gigpo/Sokoban-v0", env_kwargs={"size": 5}, max_steps=8, workers=1)
    try:
        demos = collect_demonstrations(pool, list(range(40)), explore=0.3, seed=0)
    finally:
        pool.close()
    build = PromptBuilder(tokenizer, 8, 0, "{observation}").batch_token_ids
    pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(build([d.view for d in demos]), demos)]
    held_out, train = pairs[:20], pairs[20:]
    before = _mean_logprob(tiny_model_dir, held_out)
    out = supervised_warmup(str(tiny_model_dir), tmp_path, train, steps=40, lr=1e-3, batch_size=32, seed=0, progress=False,
                            dtype=dtype)
    after = _mean_logprob(out, held_out)
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
