"""What the GPU tests build before they touch CUDA, built here on every machine: a lent GPU's minutes went once
to a recipe override that dropped the model (`model.init=null` after `model.path=` removes the path), which no
CPU run could see because every other line of tests/gpu skips without CUDA."""
from __future__ import annotations

import pytest

from test_memory_phases_cuda import sleeping_engine_config


@pytest.mark.parametrize("level", [1, 2])
def test_the_sleeping_engine_recipe_loads_with_the_tests_model(tiny_model_dir, level):
    config = sleeping_engine_config(tiny_model_dir, level)
    assert config.model.path == str(tiny_model_dir) and config.model.init is None
    assert (config.rollout.backend, config.rollout.sleep_level, config.model.dtype) == ("vllm", level, "fp32")
