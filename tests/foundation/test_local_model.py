"""`gigpo model init` builds a directory that transformers loads like any HF model.

vLLM loading the same builder's model (`cached_local_model` calls `build_local_model`, as `model init` does)
and generating what transformers does, greedy token for token, is tests/rollout/test_vllm.py's job: an engine
started here as well cost one more vLLM start-up (about 25 s) for the same check."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from gigpo.models.local import IM_END, PRESETS, cached_local_model
from gigpo.models.resolve import resolve_model_path
from support.zygote import run_cli

MESSAGES = [{"role": "system", "content": "You push boxes."}, {"role": "user", "content": "Your task is to: go up."}]


@pytest.fixture(scope="module")
def cli_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny"
    proc = run_cli(["model", "init", "--out", str(out), "--preset", "tiny"], cwd=Path.cwd(), env=dict(os.environ),
                   timeout=900)
    assert proc.returncode == 0, proc.stderr
    return out


def test_transformers_loads_generates_and_applies_chat_template(cli_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cli_model)
    model = AutoModelForCausalLM.from_pretrained(cli_model)
    assert model.config.model_type == "qwen2"
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou push boxes.<|im_end|>\n<|im_start|>user\nYour task is to: go up.<|im_end|>\n"
                    "<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    # Special tokens must be single ids, or the chat format breaks for the model.
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tok.decode(ids) == text
    assert tok.eos_token == IM_END
    out = model.generate(torch.tensor([ids]), max_new_tokens=5, do_sample=False)
    assert out.shape[1] > len(ids)


def test_cache_builds_once_and_resolve_keeps_hub_ids(tmp_path: Path) -> None:
    first = cached_local_model("tiny", cache_dir=tmp_path)
    mtime = (first / "config.json").stat().st_mtime_ns
    again = cached_local_model("tiny", cache_dir=tmp_path)
    assert again == first and (again / "config.json").stat().st_mtime_ns == mtime
    assert cached_local_model("tiny", seed=1, cache_dir=tmp_path) != first
    assert resolve_model_path("Qwen/Qwen2.5-7B-Instruct", None) == "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        cached_local_model("huge", cache_dir=tmp_path)


def test_presets_have_head_dims_vllm_cpu_supports() -> None:
    for name, spec in PRESETS.items():
        assert spec.hidden_size // spec.num_attention_heads in (32, 64, 80, 96, 112, 128), name
