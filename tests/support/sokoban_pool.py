"""A real Sokoban pool with sokoban_tiny's settings, shortened to 3 steps, and the tiny model's prompt builder:
the rollout tests that compare drivers or rank shares play on it."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import gigpo.envs  # noqa: F401  (registers the built-in envs)
from gigpo.config import Config, load_config
from gigpo.envs.pool import EnvPool


@contextmanager
def sokoban_tiny_pool(tiny_model_dir: Path, workers: int) -> Iterator[tuple[Config, EnvPool, Callable[..., Any]]]:
    """(config, pool, prompt token builder); the pool closes on exit."""
    from transformers import AutoTokenizer

    from gigpo.envs.prompt import PromptBuilder

    config = load_config("recipes/sokoban_tiny.yaml", ["env.max_steps=3"])
    e = config.env
    builder = PromptBuilder(AutoTokenizer.from_pretrained(tiny_model_dir), e.max_steps, e.history_length,
                            e.prompt_template, system=e.system_prompt)
    with EnvPool(e.id, env_kwargs={"invalid_action_penalty": e.invalid_action_penalty, **e.kwargs},
                 max_steps=e.max_steps, workers=workers) as pool:
        yield config, pool, builder.batch_token_ids
