"""The one generation interface the rollout uses, and the factory that picks a backend.

Every backend takes prompts as token ids (the prompt builder owns templating), returns completions
prompt-major (prompt i's j-th sample is at i * n + j), stamps each with the weight version that
produced it, and takes new weights as the trainer's named tensors (HF names, full precision).
"""
from __future__ import annotations

import abc
from typing import Iterable, Optional

import torch

from gigpo.config import RolloutConfig
from gigpo.rollout.types import Completion, SamplingSettings

BACKENDS = ("hf", "vllm", "vllm-server")
_DEFAULTS = RolloutConfig()  # the one home of every default below


class Generator(abc.ABC):
    """Generates completions and takes weight updates. Not thread-safe: one caller drives it."""

    def __init__(self) -> None:
        self._version = 0

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

    @abc.abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load the trainer's parameters (HF names; a tied lm_head may be absent) and set `version`."""

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


def make_generator(
    backend: str,
    model_path: str,
    *,
    dtype: str = "bf16",
    seed: int = 0,
    kv_cache_gb: float = _DEFAULTS.kv_cache_gb,
    gpu_memory_utilization: float = _DEFAULTS.gpu_memory_utilization,
    enable_prefix_caching: bool = _DEFAULTS.enable_prefix_caching,
    max_num_seqs: int = _DEFAULTS.max_num_seqs,
    max_model_len: Optional[int] = None,
    enforce_eager: bool = _DEFAULTS.enforce_eager,
    weight_sync: str = _DEFAULTS.weight_sync,
    request_timeout_s: float = _DEFAULTS.request_timeout_s,
    server_urls: Iterable[str] = (),
    num_servers: int = _DEFAULTS.num_servers,
    server_token: Optional[str] = None,
) -> Generator:
    """Build the generator for `backend` ("hf", "vllm" or "vllm-server") on the model at `model_path`."""
    if backend == "hf":
        from gigpo.rollout.hf_backend import HFGenerator

        return HFGenerator(model_path, dtype=dtype, max_batch_size=max_num_seqs,
                           prompt_cache_bytes=int(kv_cache_gb * 2**30) if enable_prefix_caching else 0)
    engine_args = dict(dtype=dtype, seed=seed, kv_cache_gb=kv_cache_gb,
                       gpu_memory_utilization=gpu_memory_utilization,
                       enable_prefix_caching=enable_prefix_caching, max_num_seqs=max_num_seqs,
                       max_model_len=max_model_len, enforce_eager=enforce_eager,
                       weight_sync=weight_sync)
    if backend == "vllm":
        from gigpo.rollout.vllm_backend import VLLMGenerator

        return VLLMGenerator(model_path, **engine_args)
    if backend == "vllm-server":
        from gigpo.rollout.server_client import ServerGenerator

        return ServerGenerator(model_path, urls=list(server_urls), num_servers=num_servers,
                               request_timeout_s=request_timeout_s, token=server_token, engine_args=engine_args)
    raise ValueError(f"unknown rollout backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def _context_length(rollout: "RolloutConfig") -> int:
    """Longest sequence the engine must hold: a rollout step, or the sync probe when verification is on."""
    length = rollout.max_prompt_tokens + rollout.max_new_tokens
    if rollout.verify_sync:
        from gigpo.rollout.verify import PROBE_NEW_TOKENS, PROBE_PROMPT_TOKENS

        length = max(length, PROBE_PROMPT_TOKENS + PROBE_NEW_TOKENS)
    return length


def generator_from_config(rollout: RolloutConfig, model_path: str, dtype: str, seed: int = 0) -> Generator:
    """make_generator with the values of a recipe's rollout section."""
    return make_generator(
        rollout.backend, model_path, dtype=dtype, seed=seed, kv_cache_gb=rollout.kv_cache_gb,
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        enable_prefix_caching=rollout.enable_prefix_caching, max_num_seqs=rollout.max_num_seqs,
        max_model_len=_context_length(rollout), enforce_eager=rollout.enforce_eager,
        weight_sync=rollout.weight_sync,
        request_timeout_s=rollout.request_timeout_s, server_urls=rollout.server_urls,
        num_servers=rollout.num_servers,
    )
