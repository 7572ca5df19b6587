"""Shared fixtures: small local models (no hub), and CPU settings for vLLM and DeepSpeed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# support.budget: the suite's time budget and its slowest tests (tests/support/budget.py); pytester: its own test.
pytest_plugins = ["support.budget", "pytester"]

# vLLM on CPU sizes its KV cache from this (GiB); the default share of a NUMA node fails here.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The launch memory check compares a plan with the RAM free at that moment, which under `make test` includes what the
# other worker's test holds: the same test passed or was refused by the neighbour's memory. tests/foundation/test_plan.py
# turns it back on where the check is what is tested.
os.environ.setdefault("GIGPO_PLAN_CHECK", "0")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny Qwen2 model and tokenizer built locally (cached by config hash across runs)."""
    from gigpo.models.local import cached_local_model

    return cached_local_model("tiny")
