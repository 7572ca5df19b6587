"""Shared fixtures: small local models (no hub), and CPU settings for vLLM and DeepSpeed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# vLLM on CPU sizes its KV cache from this (GiB); the default share of a NUMA node fails here.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny Qwen2 model and tokenizer built locally (cached by config hash across runs)."""
    from gigpo.models.local import cached_local_model

    return cached_local_model("tiny")


#: The slowest test files, slowest first (seconds under `make test`'s two workers, 2026-12-02, 2 cores). They
#: start first, so the two workers finish together instead of one running the ALFWorld recipe alone at the end
#: (57 min with the collection order). A stale list costs balance only; every test still runs.
SLOWEST_FIRST = ("trainer/test_train_loop.py", "trainer/test_sharded_train.py", "llm/test_alfworld_recipe.py",
                 "llm/test_webshop_recipe.py", "rollout/test_server.py", "trainer/test_multinode.py",
                 "llm/test_train.py", "llm/test_generation.py", "trainer/test_sigterm.py",
                 "trainer/test_eval_compare.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Collected tests reordered so the files of SLOWEST_FIRST come first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def place(item: pytest.Item) -> int:
        parts = Path(str(item.fspath)).parts
        return rank.get("/".join(parts[-2:]), len(rank))

    items.sort(key=place)  # stable: tests inside a file, and the other files, stay in collection order
