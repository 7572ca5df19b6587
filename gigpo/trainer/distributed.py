"""Ranks for the one-controller design: every rank runs the same `gigpo train`, plays its share of each
rollout (gigpo.trainer.sharding) and trains on it; only gradients (DeepSpeed's), metrics and a few
scalars (loss denominators, micro-batch counts) cross ranks.

`relaunch_command` builds the DeepSpeed launcher command that `gigpo train` re-executes itself under
when `trainer.nprocs > 1`; inside the launched ranks WORLD_SIZE is set, so it is not relaunched again.
Several machines: DeepSpeed's runner with `--hostfile` (docs/trainer.md; not run here).
CPU ranks talk over gloo, GPU ranks over NCCL. NCCL serves CUDA tensors only, so the loop's own
collectives (flags, metrics, objects, barriers) go through `side_group()`: the default group where its
backend serves CPU tensors, else a gloo group made beside it (as verl's `cpu:gloo,cuda:nccl`).
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional, Sequence, TypeVar

from gigpo.infra.ports import free_port

T = TypeVar("T")

_side_group: Any = None
"""The gloo group beside an NCCL default group (made on first use, dropped at shutdown)."""


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def configure_accelerator() -> str:
    """Tell DeepSpeed to use the CPU when there is no GPU (it must be set before deepspeed is imported)."""
    if "DS_ACCELERATOR" not in os.environ and not _cuda_available():
        os.environ["DS_ACCELERATOR"] = "cpu"
    return os.environ.get("DS_ACCELERATOR", "cuda")


def default_backend() -> str:
    return "gloo" if configure_accelerator() == "cpu" else "nccl"


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank_info() -> RankInfo:
    """This process's place among the ranks (0 of 1 when not launched)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return RankInfo(dist.get_rank(), int(os.environ.get("LOCAL_RANK", 0)), dist.get_world_size())
    return RankInfo(int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))


def init_distributed(backend: Optional[str] = None, timeout: timedelta = timedelta(hours=3)) -> RankInfo:
    """Join (or, alone, create) the process group DeepSpeed needs; idempotent.

    `timeout` bounds every collective: ranks 1.. wait in `broadcast_object` while rank 0 rolls out,
    which can take far longer than the usual 30 minutes.
    """
    import torch.distributed as dist

    backend = backend or default_backend()
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:  # a single process not started by a launcher
            os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, timeout=timeout)
    info = rank_info()
    if backend == "nccl":
        import torch

        torch.cuda.set_device(info.local_rank)
    return info


def served_device_types(backend: str) -> frozenset[str]:
    """The tensor device types a group of `backend` takes: "nccl" -> {cuda}, "gloo" -> {cpu, cuda},
    "cuda:gloo" -> {cuda}, "cpu:gloo,cuda:nccl" -> {cpu, cuda} (torch's own capability table)."""
    import torch.distributed as dist

    if ":" in backend:
        return frozenset(part.split(":", 1)[0].strip() for part in backend.split(","))
    capability = dist.Backend.backend_capability.get(backend.lower())
    if capability is None:
        raise ValueError(f"unknown process-group backend {backend!r}; known: {sorted(dist.Backend.backend_capability)}")
    return frozenset(capability)


def side_group() -> Any:
    """The group for the loop's CPU collectives: None (the default group) where its backend serves CPU
    tensors, else a gloo group of every rank, made on the first call. Every rank reaches its first
    collective at the same point, so they all make it together (`new_group` is itself collective)."""
    global _side_group
    import torch.distributed as dist

    if "cpu" in served_device_types(str(dist.get_backend())):
        return None
    if _side_group is None:
        _side_group = dist.new_group(backend="gloo")
    return _side_group


def shutdown_distributed() -> None:
    """Destroy the process group; a ZeRO-3 run on CPU that skips this aborts at exit (PLATFORM.md)."""
    global _side_group
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        barrier()
        rank = dist.get_rank()
        dist.destroy_process_group()  # every group, the side group too
        _side_group = None
        remove_shm_allreduce_buffer(rank)


def remove_shm_allreduce_buffer(rank: int, addr: Optional[str] = None, port: Optional[int] = None) -> None:
    """Unlink a rank's /dev/shm buffer of DeepSpeed's CPU all-reduce (64 MiB each, never removed by
    DeepSpeed, so they pile up in RAM-backed /dev/shm run after run). The mapping stays valid until exit.
    By default this rank's master address and port."""
    addr = addr or os.environ.get("MASTER_ADDR")
    port = port or os.environ.get("MASTER_PORT")
    if addr and port:
        path = f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}_{rank}"
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Socket closed")
"""What gloo (and NCCL's socket transport) say when the process on the other end of a collective is gone."""


def lost_rank_message(exc: BaseException) -> Optional[str]:
    """One paragraph for the user when `exc` is a collective that failed because another rank died or its
    host became unreachable; None for any other error (which then surfaces unchanged)."""
    text = str(exc)
    if not any(marker in text for marker in PEER_LOST):
        return None
    peer = re.search(r"\[([0-9A-Fa-f.:]+)\]:\d+", text)
    where = f" at {peer.group(1)}" if peer else ""
    rank = os.environ.get("RANK", "?")
    return (f"rank {rank} lost the connection to another rank{where}: that rank crashed, was killed, or its host "
            "became unreachable (see that host's log for why). This rank stops too. To continue, start every "
            "host's launcher again with --resume: training restarts from the last complete checkpoint. "
            f"[{text.splitlines()[0][:300]}]")


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank `src`'s object on every rank (pickled; fine for a batch of token ids and floats)."""
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=side_group())
    return box[0]


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's object, in rank order."""
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=side_group())
    return out


def any_rank(flag: bool) -> bool:
    """True on every rank if `flag` is True on any rank (so all ranks take the same branch)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    t = torch.tensor([1.0 if flag else 0.0])  # on the CPU: the side group serves it
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=side_group())
    return bool(t.item() > 0)


def scatter_objects(objs: Optional[Sequence[Any]], src: int = 0) -> Any:
    """Rank `src`'s `objs[r]` on each rank r (`objs`, one per rank, is read on `src` alone)."""
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return objs[0]
    box: list[Any] = [None]
    dist.scatter_object_list(box, list(objs) if dist.get_rank() == src else None, src=src, group=side_group())
    return box[0]


def all_reduce_floats(values: Sequence[float], op: str = "sum") -> list[float]:
    """The element-wise sum (or max, `op="max"`) of every rank's `values` (same length on every rank), as
    float64 on the CPU: the scalars the ranks must agree on (loss denominators, micro-batch counts)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [float(v) for v in values]
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    if op not in ops:
        raise ValueError(f"all_reduce_floats(op={op!r}): choose one of {sorted(ops)}")
    t = torch.tensor([float(v) for v in values], dtype=torch.float64)  # on the CPU: the side group serves it
    dist.all_reduce(t, op=ops[op], group=side_group())
    return t.tolist()


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier(group=side_group())


LAUNCH_ADDR = "127.0.0.1"
"""The master address of a run whose ranks all live on this machine."""


def relaunch_command(argv: Sequence[str], nprocs: int, module: str = "gigpo.cli",
                     hostfile: Optional[str] = None, master_port: Optional[int] = None,
                     script: Optional[str] = None) -> list[str]:
    """The DeepSpeed launcher command running `python -m module argv...` as `nprocs` ranks per machine.

    `script` runs a Python file instead of a module. `--no_local_rank`: our entry points read
    LOCAL_RANK from the environment, not `--local_rank`. With `hostfile`, DeepSpeed's runner starts a
    launcher on every listed machine (over ssh/pdsh; not run here). On one machine the per-node launcher
    (`deepspeed.launcher.launch`) is started directly, with the arguments DeepSpeed's runner would hand it
    (`single_node_world`): the runner would only be one more interpreter importing DeepSpeed before any rank.
    """
    if nprocs < 1:
        raise ValueError(f"trainer.nprocs={nprocs} must be at least 1")
    port = str(master_port or free_port())
    target = ([script] if script else ["--module", module]) + list(argv)
    if hostfile:
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--no_local_rank", "--master_port", port,
                "--hostfile", hostfile, "--num_gpus", str(nprocs)] + target
    return [sys.executable, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={single_node_world(nprocs)}",
            f"--master_addr={LAUNCH_ADDR}", f"--master_port={port}", "--no_local_rank"] + target


def single_node_world(nprocs: int) -> str:
    """The launcher's --world_info for `nprocs` ranks on this machine, as DeepSpeed's runner encodes it for
    `--num_nodes 1 --num_gpus N` (base64 of {"localhost": [0 .. N-1]}: the local device ids the ranks get)."""
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps({"localhost": list(range(nprocs))}).encode()).decode()


def launched() -> bool:
    """True inside a rank started by a launcher (or torchrun)."""
    return "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ


RANK_STOP_GRACE_S = 40.0
"""How long stopped ranks get to close their engines and workers before SIGKILL (DeepSpeed's per-node
launcher gives them 30 s of its own)."""


def relaunch_if_needed(argv: Sequence[str], nprocs: int, module: str = "gigpo.cli",
                       hostfile: Optional[str] = None) -> Optional[int]:
    """From `gigpo train`: with nprocs > 1 and not yet launched, run the ranks and return their exit code.

    Returns None when the caller should just carry on in this process (one rank, or already a rank).
    The launcher and ranks get a process group of their own: when this process is stopped (SIGTERM via
    gigpo.infra.stopping, Ctrl-C) it stops that group, since DeepSpeed's runner would die alone and leave the
    ranks training.
    """
    import subprocess

    from gigpo.infra.cores import share_threads
    from gigpo.infra.stopping import stop_process_group

    if nprocs <= 1 or launched():
        return None
    env = os.environ.copy()
    if configure_accelerator() == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
        share_threads(env, nprocs)  # CPU ranks share the cores
    port = free_port()
    # names the run's rendezvous port: a port clash is then readable, and so are the run's /dev/shm buffers
    print(f"gigpo: starting {nprocs} ranks with DeepSpeed's launcher, master {LAUNCH_ADDR}:{port}", file=sys.stderr,
          flush=True)
    launcher = subprocess.Popen(relaunch_command(argv, nprocs, module, hostfile, master_port=port), env=env,
                                start_new_session=True)
    try:
        return launcher.wait()
    except BaseException:
        killed = stop_process_group(launcher.pid, RANK_STOP_GRACE_S)
        launcher.wait()
        if killed:
            print(f"gigpo: {len(killed)} processes of the ranks did not stop within {RANK_STOP_GRACE_S:.0f} s of "
                  "SIGTERM and were killed", file=sys.stderr, flush=True)
        raise
    finally:  # a rank that stopped on a signal, a lost peer or an error may not have unlinked its buffer
        if hostfile is None:
            for rank in range(nprocs):
                remove_shm_allreduce_buffer(rank, LAUNCH_ADDR, port)
