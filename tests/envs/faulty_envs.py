"""A counting env whose actions can also raise, hang or kill the worker: faults on demand for pool tests."""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from gigpo.envs.base import AgentEnv


class CounterEnv(AgentEnv):
    """Starts at a count drawn from the seed; `inc` adds one; `boom` raises, `hang` sleeps, `die` exits."""

    task = "Count up."

    def __init__(self, hang_s: float = 60.0) -> None:
        super().__init__()
        self.hang_s = hang_s
        self.count = 0

    def parse_action(self, text: str) -> tuple[Optional[str], str]:
        return (text, "") if text in ("inc", "boom", "hang", "die") else (None, f"unknown action {text!r}")

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
        return f"count={self.count}", 1.0, False, {}
