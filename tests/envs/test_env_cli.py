"""`gigpo envs list | check | play` through the real command-line entry point."""
from __future__ import annotations

import pytest

import gigpo.envs
from gigpo.cli import main


def test_list_check_and_expert_play(capsys):
    assert main(["envs", "list"]) == 0
    assert set(gigpo.envs.BUILTIN_ENVS) <= set(capsys.readouterr().out.split())
    assert main(["envs", "check", "gigpo/TwentyFour-v0", "--kwargs", '{"num_cards": 3}']) == 0
    assert "check_env passed" in capsys.readouterr().out
    assert main(["envs", "play", "gigpo/Sokoban-v0", "--seed", "4", "--max-steps", "15"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Task: Push every box") and "won after" in out and "terminated" in out


def test_play_without_expert_says_so_and_bad_kwargs_are_named(capsys):
    assert main(["envs", "play", "gigpo/Taxi-v0"]) == 1
    assert "no expert action" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["envs", "play", "gigpo/Taxi-v0", "--kwargs", "{size: 6}"])
    assert "--kwargs '{size: 6}' is not JSON" in capsys.readouterr().err
