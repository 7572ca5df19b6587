"""recipes/webshop_smollm2.yaml runs one shortened iteration as shipped: the real SmolLM2 through its chat template,
the shop's page as the prompt, the expert's answers checked against rollout.max_new_tokens, a warm-up, then GiGPO
through vLLM. Only sizes shrink; model, prompt, answer length and backend stay the recipe's."""
from __future__ import annotations

import json
from pathlib import Path

from gigpo.infra.dtypes import cpu_has_fast_bf16
from support.run import ENGINE_CORE_IN_PROCESS, gigpo

RECIPE = "recipes/webshop_smollm2.yaml"


def test_one_shortened_iteration(smollm2_dir, tmp_path: Path) -> None:
    run = tmp_path / "webshop-smollm2"
    dtype = "bf16" if cpu_has_fast_bf16() else "fp32"  # as test_alfworld_recipe.py: bf16 is emulated on AVX2 CPUs
    # rollout.kv_cache_gb=1 (the recipe's 2): the CPU engine's smallest cache, plenty for 2 sequences, and a GiB
    # less held beside the other worker's test.
    # the fetched model by its path, and an empty cache otherwise: a warm-up cached by an earlier run of this test
    # on this machine would be reused, and no warm-up step would run
    proc = gigpo("train", RECIPE, f"model.path={smollm2_dir}", f"model.dtype={dtype}", "rollout.enforce_eager=true",
                 "rollout.kv_cache_gb=1", "env.kwargs.num_products=100", "env.num_groups=1", "env.group_size=2",
                 "env.max_steps=2", "env.eval_episodes=1", "trainer.sft_steps=1", "trainer.sft_rooms=4",
                 "trainer.sft_batch_size=2", "trainer.iterations=1", "logging.wandb_mode=disabled",
                 "logging.progress=false", f"trainer.run_dir={run}",
                 env={**ENGINE_CORE_IN_PROCESS, "GIGPO_CACHE": str(tmp_path / "cache")})
    assert "warm-up: step 1/1" in proc.stdout + proc.stderr  # the expert's answers fit the recipe's 64 tokens
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    it = records[1]
    assert it["rollout/episodes"] == 2 and it["adv/rows"] == it["rollout/env_steps"] > 0
    assert it.get("rollout/cut_prompts", 0) == 0  # a product page fits max_prompt_tokens in SmolLM2's tokens
    assert "eval/success" in records[0]
