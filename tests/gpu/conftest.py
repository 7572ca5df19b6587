"""tests/gpu: the CPU tests' own functions and fixtures, run again on CUDA (docs/gpu.md says how).

The CPU test modules are imported from here (tests/ and tests/trainer on sys.path), so a GPU test
module mostly names which CPU tests to collect again; what only a GPU can check is written here. Without
CUDA every module is still collected and each test is skipped with the reason, so `pytest tests/gpu`
exits 0 on CPU machines.
"""
from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for _path in (TESTS, TESTS / "trainer"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import os  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="session")
def vllm_generator(tiny_model_dir):
    """The CPU tests' engine, on CUDA with CUDA graphs (no enforce_eager, as users run it): every sync test
    collected here checks reloaded weights inside captured graphs."""
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.vllm_backend import VLLMGenerator

    gen = VLLMGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=False,
                                                            gpu_memory_utilization=0.3))
    yield gen
    gen.close()


if torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR") == "cpu":
    # tests/conftest.py defaults DeepSpeed to the CPU for the CPU suite; here the ranks must use the GPU
    os.environ["DS_ACCELERATOR"] = "cuda"
