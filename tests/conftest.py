"""Shared fixtures: small local models (no hub), and CPU settings for vLLM and DeepSpeed."""
from __future__ import annotations

import os
import sys
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


def _one_share_of_the_cores_per_worker() -> None:
    """Under xdist, each worker's tests (and every process they start) compute on their share of the cores. torch
    otherwise starts one OpenMP thread per core in every process, the two workers' threads outnumber the cores, and
    each op's thread team waits for a thread that lost its core: beside one other busy process, 21 CPU-bound tests
    (test_engines.py and the hf train loop) took 89-96 s with torch's default and 36-38 s with one thread
    (docs/benchmarks.md). The share is that of gigpo compare's and a multi-rank launch's children."""
    from gigpo.infra.cores import share_threads

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:  # one process alone, or the user chose
        return
    threads = int(share_threads(os.environ, workers))
    if "torch" in sys.modules:  # too late for the variable in this process: torch reads it when it loads
        sys.modules["torch"].set_num_threads(threads)


_one_share_of_the_cores_per_worker()


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny Qwen2 model and tokenizer built locally (cached by config hash across runs)."""
    from gigpo.models.local import cached_local_model

    return cached_local_model("tiny")
