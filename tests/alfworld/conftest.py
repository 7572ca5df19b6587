"""ALFWorld test data: six tasks generated live (one per type), and the package's shipped sample.

`alfworld_data` runs `gigpo envs alfworld-generate --n 6 --seed 0 --split train` once per session
(~20 s of CPU: the expert verifies every task twice). The same command wrote the shipped sample's
train split, so the two must be byte-identical (tested in test_generate.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.envs.alfworld.game import TASK_TYPES

SAMPLE_SEED = 0


@pytest.fixture(scope="session")
def alfworld_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root whose train/ holds one freshly generated, expert-verified task of every type."""
    from gigpo.cli import main

    root = tmp_path_factory.mktemp("alfworld")
    argv = ["envs", "alfworld-generate", "--out", str(root), "--n", str(len(TASK_TYPES)),
            "--seed", str(SAMPLE_SEED), "--split", "train", "--quiet"]
    assert main(argv) == 0
    return root


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """The package's shipped tasks: train/ (same as `alfworld_data`) and valid_unseen/, seed 0."""
    return SAMPLE_TASKS_DIR
