"""`Run`, what the loop works with, is typed and frozen: what changes while the loop runs lives in its one
mutable part (`LoopState`), so a stray assignment to the Run fails where it happens."""
from __future__ import annotations

import dataclasses

import pytest

from gigpo.trainer.setup import LoopState, Run


def test_run_is_frozen_and_no_field_is_typed_any():
    fields = dataclasses.fields(Run)
    assert Run.__dataclass_params__.frozen
    untyped = [f.name for f in fields if "Any" in str(f.type)]
    assert not untyped, f"Run fields typed Any: {untyped}"
    run = Run(**{f.name: None for f in fields} | {"loop": LoopState({"iteration": 0, "env_steps_total": 0})})
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.generator = object()  # type: ignore[misc]


def test_the_loop_state_is_the_runs_one_mutable_part():
    run = Run(**{f.name: None for f in dataclasses.fields(Run)} | {"loop": LoopState({"iteration": 3})})
    run.state["iteration"] += 1  # what the loop does after each iteration
    run.loop.pipeline = "pipeline"  # type: ignore[assignment]  (the loop builds it once the Run exists)
    assert run.state == {"iteration": 4} and run.pipeline == "pipeline"
