"""The paper's WebShop recipe runs on CPU for one short iteration with the model swapped by one override. The ALFWorld
recipe's run is tests/trainer/test_lora_train.py's: recipes/alfworld_7b_lora.yaml is alfworld_7b.yaml with LoRA
on, and that test runs it with the same shrunk sizes."""
from __future__ import annotations

import json
from pathlib import Path

from support.run import gigpo


def test_webshop_7b_recipe_one_iteration_with_a_tiny_local_model(tmp_path: Path) -> None:
    run = tmp_path / "webshop"
    gigpo("train", "recipes/webshop_7b.yaml", "model.init=tiny",
          # shrink the run to CPU size; everything else is the paper's recipe (on the generated shop)
          "env.kwargs.num_products=300", "env.num_groups=1", "env.group_size=2", "env.max_steps=2",
          "env.eval_episodes=1", "env.workers=1", "rollout.backend=hf", "rollout.max_new_tokens=8",
          "rollout.max_prompt_tokens=1024", "model.dtype=fp32", "model.gradient_checkpointing=false",
          "trainer.iterations=1", "trainer.nprocs=1", "trainer.zero_stage=0", "trainer.micro_token_budget=2048",
          "logging.wandb_mode=disabled", "logging.progress=false", f"trainer.run_dir={run}")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    assert records[1]["rollout/env_steps"] == 4  # 2 episodes x 2 steps: buying takes 3 (search, open, buy)
    assert records[1]["adv/rows"] == 4
