"""`gigpo train` with LoRA end to end: the 7B LoRA recipe for one CPU iteration, and an exact resume."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from support.run import gigpo, train, train_and_kill_in_iteration_3

LORA = ["model.lora.enabled=true", "model.lora.rank=4", "algorithm.kl_coef=0.01"]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_alfworld_7b_lora_recipe_one_iteration_with_a_tiny_local_model(tmp_path: Path) -> None:
    """Also the paper's ALFWorld recipe's CPU run (alfworld_7b.yaml, which the LoRA recipe builds on unchanged but
    for LoRA, lr, KL, ranks and ZeRO stage): its env, prompt and answer sizes and micro-batching run here."""
    config = gigpo("config", "recipes/alfworld_7b_lora.yaml").stdout
    assert "enabled: true" in config and "rank: 64" in config and "alpha: 64.0" in config
    assert "id: gigpo/ALFWorld-v0" in config and "max_prompt_tokens: 2048" in config  # alfworld_7b.yaml's settings
    run = tmp_path / "alfworld_lora"
    gigpo("train", "recipes/alfworld_7b_lora.yaml", "model.init=tiny",
          # shrink the run to CPU size; the LoRA settings, ZeRO-3 and gradient checkpointing stay the recipe's
          f"env.kwargs.data_path={SAMPLE_TASKS_DIR}", f"env.eval_kwargs.data_path={SAMPLE_TASKS_DIR}",
          "env.num_groups=1", "env.group_size=2", "env.max_steps=2", "env.eval_episodes=1", "env.workers=1",
          "rollout.backend=hf", "rollout.max_new_tokens=8", "model.dtype=fp32", "algorithm.kl_coef=0.01",
          "trainer.iterations=1", "trainer.nprocs=1", "trainer.micro_token_budget=8192",
          "logging.wandb_mode=disabled", "logging.progress=false", f"trainer.run_dir={run}")
    records = metrics(run)
    assert [r["iteration"] for r in records] == [0, 1]
    assert records[1]["rollout/env_steps"] == 4  # 2 episodes x 2 steps: no won episodes from a random model
    assert records[1]["adv/rows"] == 4
    assert records[1]["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # the adapters start at B = 0: policy = reference
    adapter = json.loads((run / "checkpoints" / "1" / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 64 and adapter["lora_alpha"] == 64
    assert (run / "checkpoints" / "1" / "hf" / "model.safetensors").is_file()


def test_killed_lora_run_resumes_and_reproduces_the_next_iteration(tmp_path: Path) -> None:
    common = [*LORA, "trainer.iterations=3", "trainer.save_every=1", "trainer.keep_last=5", "trainer.lr=1e-3"]
    reference = tmp_path / "reference"
    train(reference, *common)

    run = tmp_path / "killed"
    train_and_kill_in_iteration_3(run, *common)
    assert (run / "checkpoints" / "2" / "adapter" / "adapter_model.safetensors").is_file()

    train(run, *common, resume=True)
    records = metrics(run)
    assert [r["iteration"] for r in records] == [0, 1, 2, 3]
    got, want = records[3], metrics(reference)[3]
    assert got["rollout/return"] == pytest.approx(want["rollout/return"])
    assert got["rollout/tokens_generated"] == want["rollout/tokens_generated"]
    # the update depends on the restored adapters, optimizer moments and the adapter-free reference
    for key in ("loss/policy", "loss/kl", "loss/entropy", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-9), key
    assert want["loss/kl"] > 0  # the adapters moved away from the reference by iteration 3
