"""The `gigpo` command line: overrides are accepted before or after options, stray arguments are refused."""
from __future__ import annotations

import pytest

from gigpo.cli import main


def test_overrides_after_options_reach_the_recipe(capsys):
    # the unknown key is reported by the recipe loader, so the override was taken although it follows --resume
    assert main(["train", "recipes/sokoban_tiny.yaml", "--resume", "trainer.bogus=1"]) == 2
    assert "unknown key trainer.bogus" in capsys.readouterr().err
    assert main(["compare", "recipes/sokoban_tiny.yaml", "--seeds", "2", "trainer.lr=-1"]) == 2
    assert "trainer.lr" in capsys.readouterr().err


def test_unknown_options_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "recipes/sokoban_tiny.yaml", "--nope"])
    assert exc.value.code == 2 and "unrecognized arguments: --nope" in capsys.readouterr().err
