"""recipes/alfworld_smollm2.yaml runs one shortened iteration as shipped: the real SmolLM2 through its chat template,
ALFWorld's task, past actions, observation and admissible actions as the prompt, the expert's answers checked against
rollout.max_new_tokens, a warm-up, then GiGPO through vLLM. Only sizes shrink, and the tasks are the package's
sample tasks (the recipe's generated ones are not in a clean clone)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.infra.dtypes import cpu_has_fast_bf16
from support.run import gigpo

RECIPE = "recipes/alfworld_smollm2.yaml"


def test_the_recipe_resolves_to_smollm2_and_the_past_actions_prompt() -> None:
    config = yaml.safe_load(gigpo("config", RECIPE).stdout)
    assert config["model"]["path"] == "smollm2-135m-instruct" and config["rollout"]["backend"] == "vllm"
    assert "{past_actions}" in config["env"]["prompt_template"] and config["env"]["history_length"] == 0
    assert config["env"]["kwargs"]["split"] == "train" and config["env"]["eval_kwargs"] == {"split": "valid_seen"}
    assert config["env"]["max_steps"] == 50 and config["trainer"]["sft_steps"] > 0


def test_one_shortened_iteration(smollm2_dir, tmp_path: Path) -> None:
    run = tmp_path / "alfworld-smollm2"
    dtype = "bf16" if cpu_has_fast_bf16() else "fp32"  # as tests/llm/test_train.py: bf16 is emulated on AVX2 CPUs
    # an empty cache: a warm-up cached by an earlier run of this test on this machine would be reused
    proc = gigpo("train", RECIPE, f"model.path={smollm2_dir}", f"model.dtype={dtype}", "rollout.enforce_eager=true",
                 f"env.kwargs.data_path={SAMPLE_TASKS_DIR}", "env.eval_kwargs.split=valid_unseen",
                 "env.num_groups=1", "env.group_size=2", "env.max_steps=2", "env.eval_episodes=1",
                 "trainer.sft_steps=1", "trainer.sft_rooms=2", "trainer.sft_batch_size=2",
                 "trainer.iterations=1", "logging.wandb_mode=disabled", "logging.progress=false",
                 f"trainer.run_dir={run}", env={"GIGPO_CACHE": str(tmp_path / "cache")})
    out = proc.stdout + proc.stderr
    assert "expert-labelled states from 2 tasks" in out and "warm-up: step 1/1" in out  # the answers fit 32 tokens
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    it = records[1]
    assert it["rollout/episodes"] == 2 and it["adv/rows"] == it["rollout/env_steps"]
    assert 2 <= it["rollout/env_steps"] <= 2 * 2  # an episode stops at 2 steps here
    assert it.get("rollout/cut_prompts", 0) == 0  # a room's first observation and list fit max_prompt_tokens
    assert "eval/success" in records[0]
