"""The one generation interface the rollout uses (the factory that picks a backend is gigpo.rollout.factory).

Every backend takes prompts as token ids (the prompt builder owns templating), returns completions
prompt-major (prompt i's j-th sample is at i * n + j), stamps each with the weight version that
produced it, and takes new weights as the trainer's named tensors (HF names, full precision).
"""
from __future__ import annotations

import abc
from typing import Callable, ClassVar, Iterable, Literal, Optional, Union

import torch

from gigpo.config import RolloutConfig
from gigpo.rollout.types import Completion, SamplingSettings

Turns = Literal["batched", "async"]
CompletionCallback = Callable[[Union[list[Completion], BaseException]], None]
"""Called once per submitted prompt, from any thread: its `n` completions, or the error that stopped them."""
AUTO_TURNS: dict[str, Turns] = {"hf": "batched", "vllm": "async", "vllm-server": "batched"}
"""What rollout.turns=auto means per backend, as measured (docs/benchmarks.md): hf has no async path; the
in-process engine was faster async even on a CPU-bound env; the server was slower async there (a request
per prompt), so it stays batched unless rollout.turns=async (worth it for slow envs: 2.1x at 200 ms steps)."""
_ROLLOUT = RolloutConfig()


def resolve_turns(turns: str, backend: Optional[str], tensor_parallel_size: int) -> Turns:
    """rollout.turns as a generator of `backend` plays it. auto: AUTO_TURNS[backend], but batched for a
    tensor-parallel engine (its ranks must send it the same requests in the same order) and for a generator
    that is none of the backends (it generates whole turns unless it says it can take single requests)."""
    if turns != "auto":
        return turns  # type: ignore[return-value]
    if tensor_parallel_size > 1 or backend not in AUTO_TURNS:
        return "batched"
    return AUTO_TURNS[backend]


class Generator(abc.ABC):
    """Generates completions and takes weight updates. Not thread-safe: one caller drives it."""

    rollout_backend: ClassVar[Optional[str]] = None
    """The rollout.backend this class implements (None: none of them, e.g. a test's scripted policy)."""
    turns: Turns
    """How a rollout drives this generator: "batched" (one `generate` call per turn, every episode waiting
    for the slowest) or "async" (each episode's prompt `submit`ted as soon as its env step ends). Starts as
    rollout.turns' default resolved for this backend; the factory sets it from the recipe's `rollout.turns`;
    "async" needs `can_submit`."""

    def __init__(self, tensor_parallel_size: int = _ROLLOUT.tensor_parallel_size) -> None:
        self._version = 0
        self.turns = resolve_turns(_ROLLOUT.turns, self.rollout_backend, tensor_parallel_size)

    @property
    def version(self) -> int:
        """Weight version of the last sync (0: the weights loaded from the model directory)."""
        return self._version

    @property
    def num_replicas(self) -> int:
        """Independent engines behind this generator (each must be verified after a sync)."""
        return 1

    @abc.abstractmethod
    def generate(self, prompts: list[list[int]], settings: SamplingSettings) -> list[Completion]:
        """Sample `settings.n` completions per prompt; prompt-major order."""

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load the trainer's parameters (HF names; a tied lm_head may be absent) and set `version`, which
        must be newer. The path they take (file, broadcast, by reference) is chosen for every backend in
        gigpo.rollout.weight_sync.transports; the trainer calls this through gigpo.rollout.weight_sync."""
        from gigpo.rollout.weight_sync.transports import deliver

        check_version(version, self.version)
        deliver(self, named_tensors, version)

    @property
    def can_submit(self) -> bool:
        """Whether `submit` works: the engine takes requests one at a time and batches them itself."""
        return False

    def submit(self, prompt: list[int], settings: SamplingSettings, done: CompletionCallback) -> None:
        """Start sampling `settings.n` completions of one prompt and return at once; `done` gets them
        (prompt_index 0) when they are ready. `settings.seed` seeds this request alone."""
        raise NotImplementedError(f"{type(self).__name__} generates whole turns only (rollout.turns=batched); "
                                  "async turns need the vllm or vllm-server backend")

    def end_rollout(self) -> None:
        """A rollout is over: drop what was kept across its turns for speed (the HF backend's prompt
        cache), so it does not sit in memory through the log-prob and update phases."""

    def close(self) -> None:
        """Release processes and memory. Idempotent."""

    def __enter__(self) -> "Generator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_prompts(prompts: list[list[int]], vocab_size: int) -> None:
    """Reject empty prompts and out-of-vocabulary ids with an error that names the prompt."""
    if not isinstance(prompts, list):
        raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    for i, ids in enumerate(prompts):
        if len(ids) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        bad = [t for t in ids if not 0 <= int(t) < vocab_size]
        if bad:
            raise ValueError(f"prompt {i} has token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}")


def check_version(new: int, current: int) -> None:
    if new <= current:
        raise ValueError(f"weight version {new} must be greater than the current version {current}")
