"""Recipes: inheritance, overrides, and errors that name the bad key, value and expected type."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gigpo.config import Config, RecipeError, dump_config, load_config

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.name != "base.yaml"], ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe: Path) -> None:
    config = load_config(recipe)
    assert isinstance(config, Config)
    assert config.model.path or config.model.init


def test_base_inheritance_and_override_order(tmp_path: Path) -> None:
    write(tmp_path / "parent.yaml", "model: {init: tiny}\ntrainer: {lr: 0.5, iterations: 7}\nenv: {kwargs: {a: 1, b: 2}}\n")
    child = write(tmp_path / "child.yaml", "base: parent.yaml\ntrainer: {lr: 0.25}\nenv: {kwargs: {a: 9}}\n")
    config = load_config(child, ["trainer.iterations=3", "algorithm.similarity=0.9"])
    assert config.trainer.lr == 0.25          # child beats parent
    assert config.trainer.iterations == 3     # override beats both
    assert config.algorithm.similarity == 0.9
    assert config.env.kwargs == {"a": 9}      # env kwargs are replaced whole, not merged key by key


def test_unknown_key_names_key_and_closest_valid_one() -> None:
    with pytest.raises(RecipeError) as err:
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["trainer.iteratons=3"])
    assert "trainer.iteratons" in str(err.value)
    assert "trainer.iterations" in str(err.value)


def test_wrong_type_names_key_value_and_expected_type() -> None:
    with pytest.raises(RecipeError) as err:
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["trainer.lr=abc"])
    message = str(err.value)
    assert "trainer.lr" in message and "'abc'" in message and "number" in message


def test_missing_file_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(RecipeError, match="nope.yaml"):
        load_config(missing)
    child = write(tmp_path / "child.yaml", "base: gone.yaml\n")
    with pytest.raises(RecipeError, match="gone.yaml"):
        load_config(child)


def test_inheritance_loop_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "base: b.yaml\n")
    write(tmp_path / "b.yaml", "base: a.yaml\n")
    with pytest.raises(RecipeError, match="loops"):
        load_config(tmp_path / "a.yaml")


def test_model_source_is_required_and_exclusive(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="model.path"):
        load_config(write(tmp_path / "none.yaml", "trainer: {lr: 1.0}\n"))
    with pytest.raises(RecipeError, match="either model.path or model.init"):
        load_config(write(tmp_path / "both.yaml", "model: {path: x, init: tiny}\n"))


def test_malformed_yaml_and_override(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_config(write(tmp_path / "bad.yaml", "model: [unclosed\n"))
    with pytest.raises(RecipeError, match="section.key=value"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["trainer.lr"])


def test_dump_round_trips(tmp_path: Path) -> None:
    config = load_config(REPO / "recipes" / "alfworld_7b.yaml", ["trainer.lr=2e-6"])
    again = load_config(write(tmp_path / "dumped.yaml", dump_config(config)))
    assert again == config


def gigpo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gigpo.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_cli_config_prints_resolved_recipe_and_fails_on_bad_keys() -> None:
    ok = gigpo("config", "recipes/alfworld_7b.yaml", "trainer.lr=3e-6")
    assert ok.returncode == 0, ok.stderr
    assert "lr: 3.0e-06" in ok.stdout and "Qwen/Qwen2.5-7B-Instruct" in ok.stdout
    bogus = gigpo("config", "recipes/alfworld_7b.yaml", "trainer.bogus=1")
    assert bogus.returncode != 0 and "trainer.bogus" in bogus.stderr
    wrong = gigpo("config", "recipes/alfworld_7b.yaml", "trainer.lr=abc")
    assert wrong.returncode != 0 and "trainer.lr" in wrong.stderr and "number" in wrong.stderr


def test_command_line_model_source_replaces_the_recipes() -> None:
    config = load_config(REPO / "recipes" / "alfworld_7b.yaml", ["model.init=tiny"])
    assert config.model.init == "tiny" and config.model.path is None
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["model.path=/some/dir"])
    assert config.model.path == "/some/dir" and config.model.init is None


def test_unknown_estimator_lists_the_valid_ones() -> None:
    with pytest.raises(RecipeError, match="algorithm.estimator='gipgo' is unknown; valid: gigpo, grpo, ppo, rloo"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["algorithm.estimator=gipgo"])
