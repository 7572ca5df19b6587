"""GPU weight sync: NCCL broadcast from the trainer's GPU into vLLM's GPU workers, through vLLM's
weight-transfer API (`vllm.distributed.weight_transfer`, `WeightTransferConfig(backend="nccl")`).

NOT RUN HERE: these machines have no GPU and no NCCL. Written against vllm 0.32's documented
trainer-side API (NCCLTrainerWeightTransferEngine + a VLLMWeightSyncClient) and kept beside the
CPU path: the same generator classes, the same `update_weights(named_tensors, version)`, the same
prefix-cache reset and version bump. See docs/generation.md.

Handshake (once): the trainer opens NCCL rank 0 at master_address:master_port while the engine's
workers join as ranks 1..world_size-1 (`init_weight_transfer_engine`). Per sync: the client starts
an update, the workers receive while the trainer broadcasts, the client finishes the update.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

import torch

from gigpo.rollout.weights import EMBED, LM_HEAD


def make_source(tied_lm_head: bool) -> Any:
    """A vLLM WeightSource over whatever named tensors the trainer hands to the current sync."""
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class NamedTensorSource(WeightSource):
        def __init__(self) -> None:
            self.tensors: list[tuple[str, torch.Tensor]] = []

        def set(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
            tensors = [(n.removeprefix("module."), t.detach()) for n, t in named_tensors]
            names = {n for n, _ in tensors}
            if tied_lm_head and LM_HEAD not in names and EMBED in names:
                tensors.append((LM_HEAD, dict(tensors)[EMBED]))
            self.tensors = tensors

        def metadata(self) -> list[Any]:
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors]

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            return iter(list(self.tensors))

    return NamedTensorSource()


class EngineClient:
    """VLLMWeightSyncClient for an in-process vllm.LLM: the worker methods via collective_rpc."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.collective_rpc("init_weight_transfer_engine", args=(init_info,))

    def start_weight_update(self) -> None:
        self.llm.collective_rpc("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self.llm.collective_rpc("update_weights", args=(update_info,))

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self.llm.collective_rpc("finish_weight_update")


class HTTPClient:
    """VLLMWeightSyncClient for a `gigpo serve` process (its /weight_transfer/* routes)."""

    def __init__(self, url: str, token: Optional[str], timeout_s: float) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _post(self, route: str, body: Optional[dict] = None) -> None:
        import requests

        resp = requests.post(f"{self.url}/weight_transfer/{route}", json=body or {}, headers=self.headers,
                             timeout=self.timeout_s)
        resp.raise_for_status()

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._post("init", {"info": init_info})

    def start_weight_update(self) -> None:
        self._post("start")

    def update_weights(self, update_info: Any) -> None:
        self._post("update", {"info": update_info})

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self._post("finish", {"version": weight_version})


class NCCLWeightSender:
    """Trainer side of one NCCL group (trainer rank 0 + the engine's workers)."""

    def __init__(self, client: Any, *, master_address: str, master_port: int, num_workers: int,
                 tied_lm_head: bool) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        if not torch.cuda.is_available():
            raise RuntimeError("rollout.weight_sync=nccl needs CUDA GPUs and NCCL; on CPU use weight_sync=shm")
        self.source = make_source(tied_lm_head)
        info = NCCLTrainerInitInfo(master_address=master_address, master_port=master_port,
                                   world_size=1 + num_workers, rank=0)
        self.engine = NCCLTrainerWeightTransferEngine.trainer_init(info, client=client, source=self.source)

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.source.set(named_tensors)
        self.engine.send_weights()

    def close(self) -> None:
        self.engine.shutdown()
