"""Recipes: inheritance, overrides, and errors that name the bad key, value and expected type."""
from __future__ import annotations

import subprocess
import os
from pathlib import Path

import pytest
import yaml

from gigpo.config import Config, RecipeError, build_config, dump_config, load_config
from support.zygote import run_cli

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# Environments a shipped recipe names before gigpo has them (the recipe says so in its header).
NOT_YET_REGISTERED = {"gigpo/WebShop-v0"}


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.name != "base.yaml"], ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe: Path) -> None:
    import gymnasium as gym

    import gigpo.envs  # noqa: F401

    env_id = (yaml.safe_load(recipe.read_text()).get("env") or {}).get("id")
    if env_id in NOT_YET_REGISTERED and env_id not in gym.registry:
        with pytest.raises(RecipeError, match=f"env.id='{env_id}' is not a registered environment"):
            load_config(recipe)
        return
    config = load_config(recipe)
    assert isinstance(config, Config)
    assert config.model.path or config.model.init


def test_base_inheritance_and_override_order(tmp_path: Path) -> None:
    write(tmp_path / "parent.yaml", "model: {init: tiny}\ntrainer: {lr: 0.5, iterations: 7}\n"
                                    "env: {kwargs: {size: 6, num_boxes: 2}}\n")
    child = write(tmp_path / "child.yaml", "base: parent.yaml\ntrainer: {lr: 0.25}\nenv: {kwargs: {size: 9}}\n")
    config = load_config(child, ["trainer.iterations=3", "algorithm.similarity=0.9"])
    assert config.trainer.lr == 0.25          # child beats parent
    assert config.trainer.iterations == 3     # override beats both
    assert config.algorithm.similarity == 0.9
    assert config.env.kwargs == {"size": 9}   # env kwargs are replaced whole, not merged key by key


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


def test_a_text_key_given_digits_on_the_command_line_keeps_them_as_written() -> None:
    digits = "0" + "7" * 63  # a sha256 of digits only, leading zero: YAML would read an octal number
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml",
                         ["trainer.run_dir=0755", "model.path=2024", "trainer.sft_artifact=warm",
                          f"trainer.sft_artifact_sha256={digits}", "trainer.lr=2e-6", "model.init=null"])
    assert config.trainer.run_dir == "0755" and config.model.path == "2024"
    assert config.trainer.sft_artifact_sha256 == digits
    assert config.trainer.lr == 2e-6 and config.model.init is None  # numbers and null still read as YAML


def test_dump_round_trips(tmp_path: Path) -> None:
    config = load_config(REPO / "recipes" / "alfworld_7b.yaml", ["trainer.lr=2e-6"])
    again = load_config(write(tmp_path / "dumped.yaml", dump_config(config)))
    assert again == config


def gigpo(*args: str) -> subprocess.CompletedProcess:
    return run_cli(list(args), cwd=REPO, env=dict(os.environ), timeout=900)


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
    # clearing the recipe's source after naming another must not clear the one just named
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["model.path=/some/dir", "model.init=null"])
    assert config.model.path == "/some/dir" and config.model.init is None


def test_unknown_estimator_lists_the_valid_ones() -> None:
    with pytest.raises(RecipeError, match="algorithm.estimator='gipgo' is unknown; valid: gigpo, graphgpo, grpo, hgpo, ppo, rloo"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["algorithm.estimator=gipgo"])


def test_unknown_env_id_is_caught_with_a_hint() -> None:
    with pytest.raises(RecipeError) as err:
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["env.id=gigpo/Sokobn-v0"])
    assert "env.id='gigpo/Sokobn-v0' is not a registered environment" in str(err.value)
    assert "did you mean gigpo/Sokoban-v0?" in str(err.value)
    with pytest.raises(RecipeError, match="did you mean gigpo/FrozenLake-v0"):  # gigpo's, not Gymnasium's FrozenLake-v1
        load_config(REPO / "recipes" / "frozenlake_tiny.yaml", ["env.id=gigpo/FrozenLak-v0"])
    with pytest.raises(RecipeError) as err:
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["env.id=gigpo/Chess-v0"])
    assert "did you mean" not in str(err.value) and "gigpo/Sokoban-v0" in str(err.value)  # the list, no guess


@pytest.mark.parametrize("recipe, overrides, message", [
    ("sokoban_tiny.yaml", ["env.kwargs={sise: 5}"], "env.kwargs of gigpo/Sokoban-v0: unknown argument(s) sise (did you mean size?)"),
    ("sokoban_tiny.yaml", ["env.eval_kwargs={num_box: 2}"], "env.eval_kwargs of gigpo/Sokoban-v0: unknown argument(s) num_box (did you mean num_boxes?)"),
    # a factory with **kwargs: the names of the class it returns count too
    ("frozenlake_tiny.yaml", ["env.kwargs={map_sise: 4}"], "unknown argument(s) map_sise (did you mean map_size?)"),
    ("alfworld_7b.yaml", ["env.kwargs={splt: train}"], "unknown argument(s) splt (did you mean split?)"),
    # one episode length: env.max_steps, never a second one in the env's kwargs
    ("webshop_tiny.yaml", ["env.kwargs.max_steps=5"], "env.kwargs.max_steps=5: the episode length is one setting, env.max_steps"),
    ("alfworld_7b.yaml", ["env.eval_kwargs={max_steps: 20}"], "set env.max_steps=20 and drop it from env.eval_kwargs"),
    ("sokoban_tiny.yaml", ["env.kwargs={max_steps: 9}"], "set env.max_steps=9 and drop it from env.kwargs"),
])
def test_unknown_env_kwargs_are_caught(recipe: str, overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError) as err:
        load_config(REPO / "recipes" / recipe, overrides)
    assert message in str(err.value)
    # the accepted ones still pass, including those the factory passes through to its class
    load_config(REPO / "recipes" / "frozenlake_tiny.yaml", ["env.kwargs={map_size: 4, invalid_action_penalty: 0.5}"])


def test_train_rejects_a_bad_env_before_loading_any_model(tmp_path: Path) -> None:
    """The model path does not exist: a run that got as far as loading it would fail differently."""
    for override, needle in (("env.id=gigpo/Sokobn-v0", "did you mean gigpo/Sokoban-v0"),
                             ("env.kwargs={sise: 5}", "did you mean size")):
        proc = gigpo("train", "recipes/sokoban_tiny.yaml", f"model.path={tmp_path / 'no-model'}", override,
                     f"trainer.run_dir={tmp_path / 'run'}")
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "run").exists()


def test_mini_batches_by_count_or_size_but_not_both() -> None:
    default = load_config(REPO / "recipes" / "sokoban_tiny.yaml")
    assert (default.trainer.mini_batches, default.trainer.mini_batch_size) == (4, None)
    by_size = load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["trainer.mini_batch_size=64"])
    assert (by_size.trainer.mini_batches, by_size.trainer.mini_batch_size) == (None, 64)
    assert load_config(REPO / "recipes" / "alfworld_7b.yaml").trainer.mini_batches is None  # the paper's 256 steps
    with pytest.raises(RecipeError, match="mini_batches=4 and trainer.mini_batch_size=64 both"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["trainer.mini_batches=4", "trainer.mini_batch_size=64"])
    with pytest.raises(RecipeError, match="both null"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", ["trainer.mini_batches=null"])
    # a saved config (both keys written, one null) loads back to the same rule
    again = build_config(yaml.safe_load(dump_config(by_size)))
    assert (again.trainer.mini_batches, again.trainer.mini_batch_size) == (None, 64)
