"""Trainer fixtures: a fresh batch of random samples for each test."""
from __future__ import annotations

import pytest

from trainer_helpers import make_samples


@pytest.fixture
def samples():
    return make_samples()
