"""recipes/alfworld_smollm2.yaml runs one shortened iteration as shipped: the real SmolLM2 through its chat template,
ALFWorld's task, past actions, observation and admissible actions as the prompt, the expert's answers checked against
rollout.max_new_tokens, a warm-up, then GiGPO through vLLM with every weight sync verified. Only sizes shrink, and the
tasks are the package's sample tasks (the recipe's generated ones are not in a clean clone).

The one run is also the suite's real-model training run: its verified sync, its memory figures and its checkpoint
(which must load in plain transformers and generate) are checked here, so no second SmolLM2 + vLLM + DeepSpeed stack
starts for them."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.infra.dtypes import cpu_has_fast_bf16
from gigpo.rollout.weight_sync.verify import default_tolerance
from support.run import ENGINE_CORE_IN_PROCESS, gigpo

RECIPE = "recipes/alfworld_smollm2.yaml"
DTYPE = "bf16" if cpu_has_fast_bf16() else "fp32"
"""The recipe's bf16 where this CPU computes it natively. On an AVX2-only CPU the trainer widens bf16 matmuls
(gigpo.infra.cpu_bf16) but vLLM's bf16 kernels stay emulated (6.6x slower generation, a 2x slower engine start), so
there the real model's path (tokenizer, template, vocabulary, vLLM sync) is checked in fp32; bf16's numerics
stay covered with the tiny model and on AVX-512 machines."""


def test_the_recipe_resolves_to_smollm2_and_the_past_actions_prompt() -> None:
    config = yaml.safe_load(gigpo("config", RECIPE).stdout)
    assert config["model"]["path"] == "smollm2-135m-instruct" and config["rollout"]["backend"] == "vllm"
    assert "{past_actions}" in config["env"]["prompt_template"] and config["env"]["history_length"] == 0
    assert config["env"]["kwargs"]["split"] == "train" and config["env"]["eval_kwargs"] == {"split": "valid_seen"}
    assert config["env"]["max_steps"] == 50 and config["trainer"]["sft_steps"] > 0


@pytest.fixture(scope="module")
def recipe_run(smollm2_dir, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The recipe's run, shrunk: 1 warm-up step of 2 rows, 2 episodes of at most 2 steps, 1 evaluation episode.
    rollout.kv_cache_gb=1 (the recipe's 2): the CPU engine's smallest cache, plenty for 2 sequences of 1,568 tokens."""
    root = tmp_path_factory.mktemp("alfworld-smollm2")
    run = root / "run"
    # an empty cache: a warm-up cached by an earlier run of this test on this machine would be reused
    proc = gigpo("train", RECIPE, f"model.path={smollm2_dir}", f"model.dtype={DTYPE}", "rollout.enforce_eager=true",
                 "rollout.kv_cache_gb=1", f"env.kwargs.data_path={SAMPLE_TASKS_DIR}",
                 "env.eval_kwargs.split=valid_unseen", "env.num_groups=1", "env.group_size=2", "env.max_steps=2",
                 "env.eval_episodes=1", "trainer.sft_steps=1", "trainer.sft_rooms=2", "trainer.sft_batch_size=2",
                 "trainer.iterations=1", "logging.wandb_mode=disabled", "logging.progress=false",
                 f"trainer.run_dir={run}", env={**ENGINE_CORE_IN_PROCESS, "GIGPO_CACHE": str(root / "cache")})
    return run, proc


def test_one_shortened_iteration(recipe_run) -> None:
    run, proc = recipe_run
    out = proc.stdout + proc.stderr
    assert "expert-labelled states from 2 tasks" in out and "warm-up: step 1/1" in out  # the answers fit 32 tokens
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    it = records[1]
    assert it["rollout/episodes"] == 2 and it["adv/rows"] == it["rollout/env_steps"]
    assert 2 <= it["rollout/env_steps"] <= 2 * 2  # an episode stops at 2 steps here
    assert it.get("rollout/cut_prompts", 0) == 0  # a room's first observation and list fit max_prompt_tokens
    assert "eval/success" in records[0]
    assert "EngineCore" not in out  # vLLM's core ran in the trainer's process (ENGINE_CORE_IN_PROCESS): none logged
    # the real model's update and verified sync (held by tests/llm/test_train.py's own run before)
    assert it["time/sync"] > 0 and all(k in it for k in ("loss/policy", "actor/grad_norm", "eval/success"))
    assert 0 < it["rollout/sync_gap_max"] <= default_tolerance(DTYPE)[0]  # verified; two kernels differ a little
    assert it["perf/peak_rss_gb/update"] > 0.5 and it["perf/peak_rss_gb/logprobs"] > 0.5
    assert (run / "checkpoints" / "1" / "hf" / "config.json").is_file()


def test_the_checkpoint_loads_in_plain_transformers_and_generates(recipe_run) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, _ = recipe_run
    ckpt = run / "checkpoints" / "1" / "hf"
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert answer.strip(), "the checkpoint generated nothing"
    # the RL update moved the warmed-up weights the run started its engines from; the warm-up is saved in fp32 and
    # the checkpoint in model.dtype, so they are compared in the checkpoint's dtype (else rounding alone differs)
    before, after = load_file(run / "warmup" / "hf" / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert before.keys() <= after.keys() | {"lm_head.weight"}
    assert any(not torch.equal(before[k].to(after[k].dtype), after[k]) for k in before.keys() & after.keys()), \
        "the update changed nothing"
