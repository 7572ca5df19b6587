"""Memory phases of a colocated rank: the generator's engine and the trainer share one GPU, so each
phase hands the other what it does not need.

    generation   vLLM awake (weights + KV cache); the KL reference in host RAM (trainer.offload_reference)
    update       vLLM asleep (rollout.sleep_level), the reference back on the GPU; log-probs, PPO update

At each change PyTorch's cached blocks go back to the driver (`torch.cuda.empty_cache`), so the side that
comes next can map them. The loop enters "update" before the advantages and "generation" before the
weight sync (a level-2 sleep dropped the weights, which the sync then reloads). `gigpo plan` models the
same two phases (gigpo/plan.py). On CPU, with the hf and vllm-server backends, and in async mode (the
engine generates while the update runs) nothing moves, and the reason is logged once.
"""
from __future__ import annotations

import time
from typing import Any, Literal, Optional

import torch

Phase = Literal["generation", "update"]
_LOGGED: set[str] = set()
"""Reasons already printed in this process (each is logged once)."""


def log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        print(f"gigpo: {message}", flush=True)


class MemoryPhases:
    """What moves between phases on this rank: the engine's sleep level (0: none) and the reference."""

    def __init__(self, generator: Any, reference: Any, sleep_level: int, offload_reference: bool,
                 off_reason: Optional[str] = None) -> None:
        self.generator = generator
        self.reference = reference
        self.sleep_level = sleep_level
        self.offload_reference = offload_reference
        self.off_reason = off_reason
        """Why nothing moves on this rank (None: phases are on)."""
        self.phase: Phase = "generation"
        """Every run starts generating (the iteration-0 evaluation, the first rollout)."""

    @classmethod
    def from_config(cls, config: Any, generator: Any, reference: Any) -> "MemoryPhases":
        r, t = config.rollout, config.trainer
        reason = None
        if not torch.cuda.is_available():
            reason = "memory phases are off on CPU (no engine sleep, no reference offload, no empty_cache)"
        elif r.mode == "async":
            reason = "memory phases are off in rollout.mode=async: the engine generates while the update runs"
        sleep = r.sleep_level if getattr(generator, "can_sleep", False) else 0  # hf, vllm-server: never
        offload = t.offload_reference and reference is not None and getattr(reference, "module", None) is not None
        return cls(generator, reference, sleep, offload, reason)

    def enter(self, phase: Phase) -> dict[str, float]:
        """Move to `phase` (a no-op if already there); returns its time and, on CUDA, the free GPU memory."""
        if self.off_reason is not None:
            log_once(self.off_reason)
            return {}
        if phase == self.phase:
            return {}
        started = time.perf_counter()
        if phase == "update":
            if self.sleep_level:
                self.generator.sleep(self.sleep_level)
            torch.cuda.empty_cache()
            if self.offload_reference:
                self.reference.module.to(torch.device("cuda", torch.cuda.current_device()))
        else:
            if self.offload_reference:
                self.reference.module.to("cpu")
            torch.cuda.empty_cache()  # the trainer's cached blocks go back, so vLLM can map its memory again
            if self.sleep_level:
                self.generator.wake_up()
        self.phase = phase
        free, _ = torch.cuda.mem_get_info()
        return {f"time/phase_{phase}": time.perf_counter() - started, f"perf/gpu_free_gb/{phase}": free / 2**30}
