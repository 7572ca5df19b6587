"""How the trainer's tensors reach each backend, decided here for all of them (`deliver`).

| backend     | rollout.weight_sync | what is sent, and how                                                      |
|-------------|---------------------|----------------------------------------------------------------------------|
| hf          | (not read)          | a host state dict, copied into the model in this process                   |
| vllm        | shm                 | a safetensors file in /dev/shm, loaded by the engine's worker, then deleted |
| vllm        | inprocess           | the trainer's tensors by reference, into an engine core in this process    |
|             |                     | (also each rank's engine under vLLM's external launcher)                   |
| vllm        | nccl                | a broadcast into the engine's workers (broadcast.py)                       |
| vllm-server | shm                 | one file for every server, kept until the next sync (a restart reloads it) |
| vllm-server | nccl                | a broadcast into each server's workers, watched per server                 |

A backend keeps only what its engine side needs (load a file, load tensors, stamp the version, restart a
server); what to send and by which path is chosen here. LoRA needs no path of its own: the actor yields
its weights with the adapters merged in (gigpo.trainer.lora.merged_weights), and they go as above.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from gigpo.rollout.weight_sync.tensors import engine_tensors, full_state_dict, write_weights_file

NamedTensors = Iterable[tuple[str, torch.Tensor]]


def deliver(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """Load `named_tensors` (HF names; a tied LM head may be absent) into `generator` as `version`, by the
    path its backend and rollout.weight_sync call for. The caller has checked that `version` is newer."""
    transport_for(generator)(generator, named_tensors, version)


def transport_for(generator: Any) -> Callable[[Any, NamedTensors, int], None]:
    """The transport of `generator`: by its `rollout_backend`, and for vLLM by its `weight_sync`."""
    backend = generator.rollout_backend
    if backend == "hf":
        return to_hf_model
    paths = {"vllm": {"shm": to_engine_file, "inprocess": to_engine_in_process, "nccl": to_engine_broadcast},
             "vllm-server": {"shm": to_servers_file, "nccl": to_servers_broadcast}}
    if backend not in paths:
        raise ValueError(f"no weight-sync transport for generator backend {backend!r}: use hf, vllm or vllm-server")
    mode = generator.weight_sync
    if mode not in paths[backend]:
        raise ValueError(f"rollout.weight_sync={mode!r} is not supported by backend {backend}: "
                         f"use one of {sorted(paths[backend])}")
    return paths[backend][mode]


def to_hf_model(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """hf: copies in the model's dtype, the tied head added, loaded into the model in this process (without
    autograd: the copies and, under ZeRO-3, the gathers that yield them)."""
    with torch.inference_mode():
        generator.load_state(full_state_dict(named_tensors, generator.tied_lm_head, dtype=generator.torch_dtype),
                             version)


def to_engine_file(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """vllm, shm: a safetensors file in /dev/shm (torch tensors through vLLM's RPC arrive as nested lists),
    loaded by the engine's worker and deleted."""
    generator.check_idle()
    path = write_weights_file(full_state_dict(named_tensors, generator.tied_lm_head, dtype=generator.torch_dtype))
    try:
        generator.load_weights_file(path, version)
    finally:
        path.unlink(missing_ok=True)


def to_engine_in_process(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """vllm, inprocess: the trainer's tensors by reference, cast only where the dtype differs; the engine's
    worker copies them into its weights layer by layer."""
    generator.check_idle()
    generator.load_tensors(engine_tensors(named_tensors, generator.tied_lm_head, dtype=generator.torch_dtype),
                           version)


def to_engine_broadcast(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """vllm, nccl: a broadcast group to the engine's workers, opened at the first sync. The engine shares
    this process's device, so the group is gloo (broadcast.BroadcastWeightSender)."""
    from gigpo.infra.ports import free_port
    from gigpo.rollout.weight_sync.broadcast import BroadcastWeightSender, EngineClient

    generator.check_idle()
    if generator.broadcast_sender is None:
        generator.broadcast_sender = BroadcastWeightSender(
            EngineClient(generator.llm), master_address="127.0.0.1", master_port=free_port(),
            num_workers=generator.num_workers, tied_lm_head=generator.tied_lm_head, shares_gpu=True,
            dtype=generator.torch_dtype)
    generator.broadcast_sender.send(named_tensors)
    generator.commit_version(version)


def to_servers_file(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """vllm-server, shm: one file written once; every server loads it (servers on another machine cannot
    read it: use nccl there)."""
    path = write_weights_file(full_state_dict(named_tensors, generator.tied_lm_head, dtype=generator.torch_dtype))
    generator.serve_weights_file(path, version)


def to_servers_broadcast(generator: Any, named_tensors: NamedTensors, version: int) -> None:
    """vllm-server, nccl: a broadcast group per server (the list is kept: a restarted server is sent it again)."""
    generator.broadcast_to_servers(list(named_tensors), version)
