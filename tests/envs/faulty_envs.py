"""A counting env whose actions can also raise, hang or kill the worker: faults on demand for pool tests."""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from gigpo.envs.base import AgentEnv


class CounterEnv(AgentEnv):
    """Starts at a count drawn from the seed; `inc` adds one; `boom` raises, `hang` sleeps, `die` exits,
    `lambda` counts but puts an unpicklable object in info."""

    task = "Count up."

    def __init__(self, hang_s: float = 60.0, hang_on_reset_seed: Optional[int] = None) -> None:
        super().__init__()
        self.hang_s, self.hang_on_reset_seed = hang_s, hang_on_reset_seed
        self.count = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None):
        if seed is not None and seed == self.hang_on_reset_seed:
            time.sleep(self.hang_s)
        return super().reset(seed=seed, options=options)

    def parse_action(self, text: str) -> tuple[Optional[str], str]:
        return (text, "") if text in ("inc", "boom", "hang", "die", "lambda") else (None, f"unknown action {text!r}")

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.count = int(self.np_random.integers(0, 1000))
        return f"count={self.count}", {}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if action == "boom":
            raise RuntimeError("boom on purpose")
        if action == "hang":
            time.sleep(self.hang_s)
        if action == "die":
            os._exit(3)
        self.count += 1
        return f"count={self.count}", 1.0, False, {"callback": (lambda: None)} if action == "lambda" else {}
