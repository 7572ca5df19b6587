"""`--resume` against the run's own config.yaml (gigpo/trainer/resume_config.py): a change that makes the continuation
another experiment stops it, any other change is named and the earlier settings are kept. The CLI path, with a real
checkpoint, is in tests/trainer/test_train_loop.py::test_sigkill_in_iteration_3_then_resume_continues_exactly."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gigpo.config import dump_config, load_config
from gigpo.trainer.resume_config import ABSENT, ResumeConfigError, check_resumed_config, config_changes

RECIPE = "recipes/sokoban_tiny.yaml"


def started_run(run_dir: Path, *overrides: str) -> Path:
    """A run directory as `gigpo train` leaves it: its config.yaml (the checkpoint's contents are not read)."""
    config = load_config(RECIPE, [f"trainer.run_dir={run_dir}", *overrides])
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(dump_config(config))
    return run_dir / "checkpoints" / "3"


def test_a_resume_that_changes_the_estimator_seed_env_or_adapter_scale_stops_and_leaves_the_run_as_it_was(tmp_path: Path) -> None:
    run = tmp_path / "run"
    checkpoint = started_run(run, "algorithm.estimator=gigpo")
    saved = (run / "config.yaml").read_text()
    for overrides, key in ((["algorithm.estimator=grpo"], "algorithm.estimator"), (["trainer.seed=7"], "trainer.seed"),
                           (["env.id=gigpo/TwentyFour-v0", "env.kwargs={}"], "env.id"),
                           # the adapter's scale: the checkpoint's adapter weights would act as another policy
                           (["model.lora.alpha=8"], "model.lora.alpha")):
        config = load_config(RECIPE, [f"trainer.run_dir={run}", "algorithm.estimator=gigpo", *overrides])
        with pytest.raises(ResumeConfigError, match=f"{key}: .* there, .* now") as raised:
            check_resumed_config(config, checkpoint)
        assert str(run / "config.yaml") in str(raised.value) and "iteration 3" in str(raised.value)
    assert (run / "config.yaml").read_text() == saved
    assert not list(run.glob("config.to-iteration-*"))


def test_other_changes_are_named_and_the_settings_of_the_earlier_iterations_kept(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    checkpoint = started_run(run, "trainer.iterations=4", "trainer.lr=1e-5")
    saved = (run / "config.yaml").read_text()
    config = load_config(RECIPE, [f"trainer.run_dir={run}", "trainer.iterations=8", "trainer.lr=5e-6",
                                  "env.kwargs.size=6"])
    kept = check_resumed_config(config, checkpoint)
    assert kept == run / "config.to-iteration-3.yaml" and kept.read_text() == saved
    said = capsys.readouterr().out
    assert "trainer.iterations: 4 -> 8" in said and "trainer.lr: 1e-05 -> 5e-06" in said and "env.kwargs: " in said
    assert str(kept) in said
    # a second resume from the same checkpoint (after a crash before the next one) keeps the first copy: the
    # settings that trained iterations 1..3, not the ones the failed attempt wrote
    (run / "config.yaml").write_text(dump_config(config))
    assert check_resumed_config(load_config(RECIPE, [f"trainer.run_dir={run}"]), checkpoint) == kept
    assert kept.read_text() == saved


def test_an_unchanged_or_moved_run_resumes_without_a_word(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = started_run(tmp_path / "before")
    moved = tmp_path / "after"
    (tmp_path / "before").rename(moved)
    assert check_resumed_config(load_config(RECIPE, [f"trainer.run_dir={moved}"]), moved / "checkpoints" / "3") is None
    assert capsys.readouterr().out == "" and not list(moved.glob("config.to-iteration-*"))


def test_a_config_written_by_older_code_reads_its_missing_keys_as_absent() -> None:
    new = load_config(RECIPE).model_dump(mode="json")
    old = yaml.safe_load(yaml.safe_dump(new))
    del old["algorithm"]["hgpo_history"], old["logging"]
    changes = config_changes(old, new)
    assert changes["algorithm.hgpo_history"] == (ABSENT, new["algorithm"]["hgpo_history"])
    assert changes["logging.progress"] == (ABSENT, new["logging"]["progress"])
    assert config_changes(new, new) == {}
