"""model.path checked before anything starts: a missing directory is named, hub ids and pinned names pass."""
from __future__ import annotations

from pathlib import Path

import pytest

from gigpo.config import RecipeError
from gigpo.models.resolve import check_model_path


def test_a_missing_directory_is_refused_naming_it(tmp_path: Path) -> None:
    for missing in (str(tmp_path / "gone"), "./gone-model", "runs/x/checkpoints/10/hf", "~/no-such-gigpo-model"):
        with pytest.raises(RecipeError, match="no such directory") as info:
            check_model_path(missing)
        assert repr(missing) in str(info.value)


def test_directories_hub_ids_and_pinned_names_pass(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    for fine in (str(tmp_path / "model"), "Qwen/Qwen2.5-7B-Instruct", "gpt2", "smollm2-135m-instruct", None, ""):
        check_model_path(fine)
