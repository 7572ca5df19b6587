"""Weight sync: the trainer's weights into the generator, for every backend, in sync and async modes.

The loop calls `push_weights` after every update, in both rollout modes; set-up calls `push_start` (a
server that may hold other weights) and `resume_weights` (a run resumed from a checkpoint). What is sent,
by which path, and the check after it are decided in this package:
- `transports.py`: the path per backend and rollout.weight_sync (`deliver`, which `Generator.update_weights`
  calls): hf in-process copy, vLLM /dev/shm file, vLLM in-process tensors (also under the external
  launcher), broadcast (NCCL or gloo), servers;
- `tensors.py`: the trainer's tensors under the engine's names, the tied LM head added, as host copies (a
  state dict, or a safetensors file in /dev/shm) or by reference (an engine in this process);
- `broadcast.py`: the broadcast group the trainer sends through, and its worker side;
- `worker.py`: the code vLLM runs in its worker to load what arrives (file, tensors, broadcast);
- `verify.py`: the probe that checks, after a sync, that the generator scores like the trainer.
A package, not one file: together these are about 650 lines with five separate jobs, and `worker.py` runs
inside vLLM's worker process, where nothing else here is wanted.

The backends keep only their engine side (load a file or a state dict, reset the prefix cache, restart a
server). Async mode's scheduling (when a queued sync lands between rollouts) is gigpo.trainer.pipeline's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Protocol

if TYPE_CHECKING:
    import torch

    from gigpo.rollout.generator import Generator


class WeightSource(Protocol):
    """The trainer's side of a sync (gigpo.trainer.engines.ActorEngine): its weights, and its model for the probe."""

    def named_weights(self, include_tied: bool = True, on_device: bool = False) -> Iterator[tuple[str, "torch.Tensor"]]:
        ...

    def hf_module(self) -> "torch.nn.Module":
        ...


def push_weights(actor: WeightSource, generator: Optional["Generator"], version: int, verifier: Any = None,
                 pipeline: Any = None) -> dict[str, float]:
    """After an update, on every rank (ZeRO-3 gathers are collective): the actor's weights into the
    generator (None on a rank that plays nothing) as `version`.

    sync mode (`pipeline` None or not async): loaded now, then checked by `verifier` (a SyncVerifier, or
    a ProbeFollower on a rank without a generator), whose largest log-prob gap comes back as
    `rollout/sync_gap_max`. An engine in this process (weight_sync=inprocess), or no generator, takes the
    gathered tensors where they are; the others get host copies.
    async mode (a RolloutPipeline that is async): host copies, queued for the producer thread, which loads
    them between two rollouts; not verified (the actor trains on meanwhile; rollout.verify_sync refuses it).
    """
    if pipeline is not None and pipeline.is_async:
        return pipeline.sync(actor.named_weights(), version)
    on_device = generator is None or getattr(generator, "takes_device_tensors", False)
    gap = sync_weights(generator, actor.hf_module(), version, verifier, actor.named_weights(on_device=on_device))
    return {} if gap is None else {"rollout/sync_gap_max": gap}


def push_start(actor: WeightSource, generator: Optional["Generator"], version: int) -> None:
    """A run's start into external servers (rollout.server_urls), before the sync check's probe asks them
    for `version`: a server holds what it was started with, or what an earlier run left in it (another
    version, the base model where this run starts from a warm-up, or not the checkpoint it resumes from).
    `version` is the run's current one, so it is not required to be newer. Every rank calls it."""
    from gigpo.rollout.weight_sync.transports import deliver

    weights = actor.named_weights()  # every rank iterates them: ZeRO-3 gathers are collective
    if generator is None:
        drain(weights)
        return
    deliver(generator, weights, version)


def resume_weights(actor: WeightSource, generator: Optional["Generator"], version: int, verifier: Any,
                   started: bool) -> None:
    """A resumed run's checkpoint weights into the generator, checked as every later sync is. `started`: the
    weights were pushed already (`push_start`, external servers), so they are only checked."""
    if not started:
        push_weights(actor, generator, version, verifier)
    elif verifier is not None:
        verifier.check(actor.hf_module())


def sync_weights(generator: Optional["Generator"], model: "torch.nn.Module", version: int, verifier: Any = None,
                 named_tensors: Optional[Iterable[tuple[str, "torch.Tensor"]]] = None) -> Optional[float]:
    """Push `model`'s parameters (or the given gathered `named_tensors`) as `version`, then check them if
    a verifier is given (returns its gap). Also what tests and benchmarks call with a plain model.

    Without a generator (the ranks other than 0) the tensors are still iterated: gathering them under
    ZeRO-3 is collective, so every rank must take part."""
    tensors = named_tensors if named_tensors is not None else model.named_parameters()
    if generator is None:
        drain(tensors)
        return verifier.check(model) if verifier is not None else None  # a ProbeFollower: its forwards
    generator.update_weights(tensors, version)
    return verifier.check(model) if verifier is not None else None


def drain(named_tensors: Iterable[tuple[str, "torch.Tensor"]]) -> None:
    """Iterate the weights without sending them: on a rank without a generator, whose ZeRO-3 gathers must
    still take part (they are collective)."""
    for _ in named_tensors:
        pass
