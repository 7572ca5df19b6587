"""ALFWorld's CPU recipes: issue 38's resolves to what it promises (the local model with ALFWorld's own
tokenizer, the lean prompt, evaluation on valid_seen); issue 55's subset recipe (the mini model, the memory
prompt, two task types without kitchens) runs one shortened iteration, warm-up included, on the package's
sample tasks that its filters keep."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from support.run import gigpo

from gigpo.envs.alfworld import SAMPLE_TASKS_DIR

RECIPE = "recipes/alfworld_tiny.yaml"
SUBSET_RECIPE = "recipes/alfworld_subset_mini.yaml"


def test_the_recipe_resolves_to_a_local_model_and_valid_seen() -> None:
    config = yaml.safe_load(gigpo("config", RECIPE).stdout)
    assert config["model"]["init"] == "tiny" and config["model"]["corpus"] == "gigpo/data/alfworld_corpus.txt"
    assert config["env"]["id"] == "gigpo/ALFWorld-v0" and config["env"]["kwargs"]["expert"] is True
    assert config["env"]["kwargs"]["split"] == "train" and config["env"]["eval_kwargs"] == {"split": "valid_seen"}
    assert config["env"]["max_steps"] == 50 and config["env"]["eval_episodes"] == 100
    assert config["trainer"]["sft_steps"] > 0 and config["algorithm"]["estimator"] == "gigpo"


def test_the_subset_recipe_resolves_to_the_mini_model_and_the_memory_prompt_on_two_types() -> None:
    config = yaml.safe_load(gigpo("config", SUBSET_RECIPE).stdout)
    assert config["model"]["init"] == "mini" and config["model"]["corpus"] == "gigpo/data/alfworld_corpus.txt"
    kwargs = config["env"]["kwargs"]
    assert kwargs["prompt"] == "memory" and kwargs["expert"] is True and kwargs["split"] == "train"
    assert kwargs["task_types"] == ["pick_and_place_simple", "look_at_obj_in_light"]
    assert kwargs["scene_range"] == [201, 430] and kwargs["max_walkthrough"] == 15
    assert config["env"]["max_steps"] == 20 and config["env"]["eval_kwargs"] == {"split": "valid_seen"}


def test_one_shortened_iteration_on_the_sample_tasks(tmp_path: Path, monkeypatch) -> None:
    """The subset recipe (issue 55), the one ALFWorld's CPU learning runs use (before: alfworld_tiny, whose
    configuration test above stays)."""
    run = tmp_path / "alfworld-subset"
    # an empty cache: a warm-up cached by an earlier run on this machine would be reused, and no demonstrations
    # collected, which this test checks for
    monkeypatch.setenv("GIGPO_CACHE", str(tmp_path / "cache"))
    result = gigpo("train", SUBSET_RECIPE,
                   # the sample tasks (train and valid_unseen only; the filters keep one of each, the valid_unseen
                   # one once its 32-step stored walkthrough is allowed) and test sizes; the model, tokenizer, prompt and
                   # warm-up loss stay the recipe's. sft_micro_tokens=512 makes the warm-up run its micro-batches.
                   f"env.kwargs.data_path={SAMPLE_TASKS_DIR}", "env.eval_kwargs.split=valid_unseen",
                   "env.eval_kwargs.max_walkthrough=null",
                   "env.num_groups=1", "env.group_size=2", "env.max_steps=3", "env.eval_episodes=2", "env.workers=1",
                   "trainer.sft_steps=2", "trainer.sft_rooms=2", "trainer.sft_batch_size=4", "trainer.sft_micro_tokens=512",
                   "trainer.iterations=1", "logging.wandb_mode=disabled", "logging.progress=false",
                   f"trainer.run_dir={run}")
    assert "expert-labelled states from 2 tasks" in result.stdout
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    it = records[1]
    assert it["rollout/episodes"] == 2 and it["adv/rows"] == it["rollout/env_steps"]
    assert 2 <= it["rollout/env_steps"] <= 2 * 3  # an episode stops at 3 steps here
    assert it.get("rollout/cut_prompts", 0) == 0  # the memory prompt fits max_prompt_tokens
