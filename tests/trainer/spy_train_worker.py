"""One rank of tests/trainer/test_sharded_train.py's spy test, started by DeepSpeed's launcher: `gigpo train`'s
loop with every object collective watched.

    python spy_train_worker.py OUT_DIR RECIPE OVERRIDE...

Wraps torch.distributed's object collectives (all of gigpo's go through them: distributed.py) to note what
each payload holds, runs the training, and writes OUT_DIR/spy_rank{RANK}.json: per collective, the kinds of
step data found in the payload (steps with tokens, training samples, tensors, token-id or text columns) and its
pickled size.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def step_data(obj: Any, found: set[str], depth: int = 0) -> set[str]:
    """The kinds of step data inside `obj` (walked through containers and dataclasses)."""
    from gigpo.advantage.rows import StepRows
    from gigpo.trainer.batching import TrainSample

    if depth > 12:
        return found
    if isinstance(obj, TrainSample) or isinstance(obj, StepRows) and len(obj) and obj.response_ids is not None:
        found.add(type(obj).__name__)  # samples, or steps with their tokens (numbers-only rows may cross)
    elif isinstance(obj, torch.Tensor):
        found.add("Tensor")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            step_data(key, found, depth + 1)
            step_data(value, found, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        if obj and all(isinstance(x, str) for x in obj) and len(obj) > 1:
            found.add("texts")
        for value in obj:
            step_data(value, found, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            step_data(getattr(obj, f.name), found, depth + 1)
    elif isinstance(obj, np.ndarray) and obj.dtype == object:
        found.add("object array")
    return found


def main(out_dir: str, recipe: str, *overrides: str) -> None:
    from gigpo.config import load_config
    from gigpo.trainer.loop import train

    seen: list[dict[str, Any]] = []

    def watch(name: str, payload: Any) -> None:
        seen.append({"collective": name, "step_data": sorted(step_data(payload, set())),
                     "bytes": len(pickle.dumps(payload))})

    gather, broadcast = dist.all_gather_object, dist.broadcast_object_list

    def all_gather_object(out, obj, group=None):
        watch("all_gather_object", obj)
        return gather(out, obj, group=group)

    def broadcast_object_list(box, src=0, group=None, device=None):
        if dist.get_rank() == src:
            watch("broadcast_object_list", box)
        return broadcast(box, src=src, group=group, device=device)

    dist.all_gather_object, dist.broadcast_object_list = all_gather_object, broadcast_object_list
    train(load_config(recipe, list(overrides)))
    rank = os.environ["RANK"]
    Path(out_dir, f"spy_rank{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2], *sys.argv[3:])
