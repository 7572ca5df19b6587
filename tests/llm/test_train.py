"""One GiGPO iteration of the real model through vLLM with sync verification, on Sokoban with the full
agent prompt and the model's chat template; its checkpoint loads in plain transformers and generates."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gigpo.config import load_config
from gigpo.envs.pool import EnvPool
from gigpo.infra.dtypes import cpu_has_fast_bf16
from gigpo.rollout.weight_sync.verify import default_tolerance
from gigpo.trainer.setup import build_prompt_fn
from support.run import REPO, gigpo

from .conftest import NAME

SMOLLM_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM"
DTYPE = "bf16" if cpu_has_fast_bf16() else "fp32"
"""The recipes' bf16 where this CPU computes it natively. On an AVX2-only CPU the trainer widens bf16 matmuls
(gigpo.infra.cpu_bf16) but vLLM's bf16 kernels stay emulated (6.6x slower generation, a 2x slower engine start), so
there the real model's path (tokenizer, template, vocabulary, vLLM sync) is checked in fp32; bf16's numerics
stay covered with the tiny model and on AVX-512 machines."""
RUN = [f"model.path={NAME}", f"model.dtype={DTYPE}", "env.prompt_template=null", "env.history_length=1",
       "env.num_groups=1", "env.group_size=2", "env.max_steps=2", "env.eval_episodes=1", "env.workers=1",
       "rollout.backend=vllm", "rollout.verify_sync=true", "rollout.enforce_eager=true", "rollout.max_new_tokens=16",
       "rollout.max_prompt_tokens=512", "rollout.max_num_seqs=8", "trainer.sft_steps=0", "trainer.iterations=1",
       "trainer.lr=1e-5", "logging.wandb_mode=disabled", "logging.progress=false"]


def test_full_agent_prompt_through_the_chat_template(smollm2_dir, smollm2_tokenizer):
    """What the training run below sends: task, step, admissible actions and format, in SmolLM2's ChatML."""
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml", RUN)
    with EnvPool(config.env.id, env_kwargs=config.env.kwargs, max_steps=config.env.max_steps, workers=1) as pool:
        [view] = pool.reset([0], group_size=1)
    [ids] = build_prompt_fn(config, smollm2_tokenizer)([view])
    text = smollm2_tokenizer.decode(ids)
    assert text.startswith(f"<|im_start|>system\n{SMOLLM_DEFAULT_SYSTEM}")  # the template's own default
    assert f"<|im_start|>user\n{view.task}" in text and "Admissible actions: up, down, left, right" in text
    assert view.action_format in text and text.endswith("<|im_start|>assistant\n")
    assert len(ids) <= config.rollout.max_prompt_tokens
    ours = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*RUN, "env.system_prompt=Answer with one action."])
    [ids] = build_prompt_fn(ours, smollm2_tokenizer)([view])
    text = smollm2_tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nAnswer with one action.<|im_end|>\n")
    assert SMOLLM_DEFAULT_SYSTEM not in text  # replaced, not added to


@pytest.fixture(scope="module")
def trained_run(smollm2_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("smollm2-run")
    gigpo("train", "recipes/sokoban_tiny.yaml", *RUN, f"trainer.run_dir={run}")
    return run


def test_one_iteration_through_vllm_with_verified_sync(trained_run):
    records = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    it = records[-1]
    assert it["iteration"] == 1 and it["rollout/episodes"] == 2
    assert it.get("rollout/cut_prompts", 0) == 0  # the whole agent prompt reached the model
    assert it["time/sync"] > 0 and all(k in it for k in ("loss/policy", "actor/grad_norm", "eval/success"))
    assert 0 < it["rollout/sync_gap_max"] <= default_tolerance(DTYPE)[0]  # verified: two engines' kernels differ a little
    assert it["perf/peak_rss_gb/update"] > 0.5 and it["perf/peak_rss_gb/logprobs"] > 0.5
    assert (trained_run / "checkpoints" / "1" / "hf" / "config.json").is_file()


def test_the_checkpoint_loads_in_plain_transformers_and_generates(trained_run, smollm2_dir):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = trained_run / "checkpoints" / "1" / "hf"
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert answer.strip(), "the checkpoint generated nothing"
    before, after = load_file(smollm2_dir / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert before.keys() <= after.keys() | {"lm_head.weight"}
    assert any(not torch.equal(before[k].float(), after[k].float()) for k in before), "the update changed nothing"
