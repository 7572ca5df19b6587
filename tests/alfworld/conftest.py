"""ALFWorld test data: the package's sample tasks (six types, written by the generator with seed 0).

Generating a task costs 3-10 s of CPU (the expert verifies it twice), so the suite plays the
shipped sample and regenerates only one of its tasks to prove the sample is the generator's output.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gigpo.envs.alfworld import SAMPLE_TASKS_DIR

SAMPLE_SEED = 0


@pytest.fixture(scope="session")
def alfworld_seed() -> int:
    """The seed `gigpo envs alfworld-generate` was given to write the sample tasks."""
    return SAMPLE_SEED


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    """A data root with train/ holding one expert-verified task per type, in TASK_TYPES order by index."""
    return SAMPLE_TASKS_DIR
