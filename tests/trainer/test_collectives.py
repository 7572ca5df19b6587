"""The loop's collectives under a group that serves only the accelerator's tensors, as NCCL does.

CPU tests run gloo, which takes CPU and CUDA tensors alike, so a CPU tensor sent to an NCCL group
(`any_rank` did, before every optimizer step) passes every CPU test and crashes the first GPU update.
Here the default group is `cuda:gloo`: gloo that serves CUDA tensors only, so a CPU tensor or a
CPU-pickled object in it raises the error a GPU user would meet.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gigpo.infra.ports import free_port
from gigpo.trainer.distributed import served_device_types

REPO = Path(__file__).parents[2]
WORKER = Path(__file__).parent / "collectives_worker.py"
COLLECTIVES = {"all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv",
               "barrier", "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list", "new_group"}
"""torch.distributed functions that take a group (or make one)."""


BACKENDS = ["cuda:gloo", "gloo"]


def run_ranks(backends: list[str], out: Path, world: int = 2) -> dict[str, list[dict]]:
    """Two rank processes that run the worker's collectives under each backend in turn: backend -> each rank's
    results."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    worlds = [f"{backend}:{free_port()}" for backend in backends]
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), str(world), str(out), *worlds], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    logs = [p.communicate(timeout=180) for p in procs]
    for p, (stdout, stderr) in zip(procs, logs):
        assert p.returncode == 0, f"a rank failed:\n{stderr[-2500:]}"
    return {b: [json.loads((out / f"rank{r}-{b}.json").read_text()) for r in range(world)] for b in backends}


@pytest.fixture(scope="module")
def every_backend(tmp_path_factory) -> dict[str, list[dict]]:
    return run_ranks(BACKENDS, tmp_path_factory.mktemp("collectives"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_loop_collective_runs_in_a_group_that_serves_only_accelerator_tensors(backend, every_backend):
    results = every_backend[backend]
    for rank, got in enumerate(results):
        assert got["any_rank_last"] is True and got["any_rank_none"] is False
        assert got["gathered"] == [{"rank": 0, "loss/policy": 0.0}, {"rank": 1, "loss/policy": 0.5}]
        assert got["broadcast"] == "from rank 0"
        assert got["scattered"] == f"to rank {rank}"
        assert got["summed"] == [3.0, 4.0] and got["largest"] == [1.0, 3.0]
        # the CPU side group exists only where the default group cannot carry CPU tensors
        assert got["side_group"] is (backend == "cuda:gloo")


def test_served_device_types_follow_torchs_backend_table():
    assert served_device_types("nccl") == {"cuda"}
    assert served_device_types("gloo") == {"cpu", "cuda"}
    assert served_device_types("cuda:gloo") == {"cuda"}
    assert served_device_types("cpu:gloo,cuda:nccl") == {"cpu", "cuda"}
    with pytest.raises(ValueError, match="unknown process-group backend 'nccx'"):
        served_device_types("nccx")


def test_only_the_distributed_module_calls_torch_distributed_collectives():
    """Every collective of gigpo/ goes through gigpo/trainer/distributed.py, whose helpers pass the side
    group, so the two-rank test above covers them all. (The weight-sync broadcast, gigpo/rollout/weight_sync/broadcast.py,
    runs on a process group of its own and on its own device: it calls the group object, not torch.distributed.)"""
    offenders, unrouted = [], []
    for path in sorted((REPO / "gigpo").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in COLLECTIVES and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "dist"):
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno} dist.{node.func.attr}"
            if path.name != "distributed.py":
                offenders.append(where)
            elif node.func.attr != "new_group" and not any(
                    k.arg == "group" and ast.unparse(k.value) == "side_group()" for k in node.keywords):
                unrouted.append(where)
    assert not offenders, f"collectives outside gigpo/trainer/distributed.py: {offenders}"
    assert not unrouted, f"collectives that do not pass group=side_group(): {unrouted}"
