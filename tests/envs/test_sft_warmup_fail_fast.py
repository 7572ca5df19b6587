"""A supervised warm-up whose settings cannot work stops before its long phase, naming the setting to fix.

Real envs throughout: Taxi (no expert at all), ALFWorld from its shipped sample tasks without `expert: true`,
and Sokoban with an evaluation setting it cannot be made with. "Fast" is asserted by what ran, not by time:
one demonstration episode started, no warm-up step taken, no iteration logged.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gigpo.config import RecipeError, load_config
from gigpo.envs import EnvPool
from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.envs.demos import NoExpertError, collect_demonstrations
from gigpo.trainer.sft_warm_start import check_before_sft_warmup
from support.run import REPO, SMALL, clean_env
from support.zygote import run_cli

WARM = ["trainer.sft_steps=5", "trainer.sft_rooms=400", "trainer.sft_batch_size=4"]


def train_fails(tmp_path: Path, recipe: str, *overrides: str) -> str:
    """`gigpo train` that must stop with a recipe error (exit code 2) before any iteration; its one-line error."""
    run = tmp_path / "run"
    proc = run_cli(["train", recipe, *SMALL, *overrides, f"trainer.run_dir={run}"], cwd=REPO, env=clean_env(),
                   timeout=600)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "expert-labelled states" not in proc.stdout  # no demonstrations played
    assert not (run / "metrics.jsonl").exists() and not (run / "warmup" / "hf").exists()
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("gigpo: ")]
    return line


def test_demonstrations_stop_in_the_first_state_of_an_env_without_an_expert() -> None:
    with EnvPool("gigpo/Taxi-v0", max_steps=50, workers=1) as pool:
        with pytest.raises(NoExpertError, match=r"gigpo/Taxi-v0 gave no expert action in the first state .*"
                                                r"task seed 7\): set trainer.sft_steps: 0"):
            collect_demonstrations(pool, list(range(7, 407)), explore=0.3, fix="set trainer.sft_steps: 0")
        assert pool.stats().episodes == 1 and pool.stats().steps == 0  # not 400 random episodes first


def test_a_warm_up_on_an_env_without_an_expert_stops_at_once_naming_the_fix(tmp_path: Path) -> None:
    line = train_fails(tmp_path, "recipes/sokoban_tiny.yaml", "env.id=gigpo/Taxi-v0", "env.kwargs={}", *WARM)
    assert line.startswith("gigpo: gigpo/Taxi-v0 gave no expert action in the first state")
    assert "learns from the env's expert_action()" in line and "set trainer.sft_steps: 0" in line


def test_alfworld_without_expert_true_names_env_kwargs_expert(tmp_path: Path) -> None:
    line = train_fails(tmp_path, "recipes/alfworld_7b.yaml", "model.init=tiny", "model.dtype=fp32",
                       "model.gradient_checkpointing=false", "rollout.backend=hf", "trainer.nprocs=1",
                       "trainer.zero_stage=0", "trainer.micro_token_budget=8192",
                       f"env.kwargs.data_path={SAMPLE_TASKS_DIR}", f"env.eval_kwargs.data_path={SAMPLE_TASKS_DIR}",
                       *WARM)
    assert line.startswith("gigpo: gigpo/ALFWorld-v0 gave no expert action in the first state")
    assert "its expert is off: set env.kwargs.expert: true" in line


def test_settings_that_would_fail_after_the_warm_up_are_checked_before_it(tmp_path: Path) -> None:
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*SMALL, "env.eval_kwargs={size: 2}"])
    with pytest.raises(RecipeError, match=r"env.eval_kwargs=\{'size': 2\}: cannot make 'gigpo/Sokoban-v0'.*"
                                          r"size=2 must be at least 3.*the evaluation after the warm-up would fail"):
        check_before_sft_warmup(config, tmp_path / "warmups")
    good = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*SMALL, "env.eval_kwargs={size: 4}"])
    check_before_sft_warmup(good, tmp_path / "warmups")  # makes the evaluation env and the cache folder
    assert (tmp_path / "warmups").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(RecipeError, match=r"warm-up cache .*file/warmups is not writable.*GIGPO_CACHE"):
        check_before_sft_warmup(good, tmp_path / "file" / "warmups")
