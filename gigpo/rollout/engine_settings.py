"""Engine settings: one frozen object, built once from the recipe, handed to every backend as is.

Each default is the `RolloutConfig` field's default (gigpo/config.py), read from there, never written
again: the in-process engine, the server command line and `gigpo serve` all take this object.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Optional

from gigpo.config import ModelConfig, RolloutConfig, TrainerConfig
from gigpo.infra.dtypes import canonical_dtype

if TYPE_CHECKING:
    import argparse

_ROLLOUT = RolloutConfig()
_MODEL = ModelConfig()
_TRAINER = TrainerConfig()


@dataclass(frozen=True)
class EngineSettings:
    """What a generation engine is built with (vLLM's arguments; hf reads dtype, max_num_seqs and the cache)."""

    dtype: str = _MODEL.dtype
    seed: int = _TRAINER.seed
    """vLLM's engine seed (requests carry their own seeds where the rollout sets them)."""
    kv_cache_gb: float = _ROLLOUT.kv_cache_gb
    gpu_memory_utilization: float = _ROLLOUT.gpu_memory_utilization
    enable_prefix_caching: bool = _ROLLOUT.enable_prefix_caching
    max_num_seqs: int = _ROLLOUT.max_num_seqs
    max_model_len: Optional[int] = None
    """None: the model's own limit."""
    enforce_eager: bool = _ROLLOUT.enforce_eager
    weight_sync: Literal["shm", "nccl", "inprocess"] = _ROLLOUT.weight_sync
    max_lora_rank: Optional[int] = None
    """Set to serve LoRA adapters (adapter-only syncs, `load_adapter`); None: full-weight syncs only."""
    sleep_level: int = 0
    """vLLM's sleep mode on CUDA (enable_sleep_mode): the level the colocated engine sleeps at during the
    update (gigpo/trainer/memory_phases.py); 0: built without it. Servers never sleep."""
    tensor_parallel_size: int = _ROLLOUT.tensor_parallel_size
    """Ranks sharing one engine through vLLM's external launcher (each rank runs this engine's shard)."""

    def __post_init__(self) -> None:
        canonical_dtype(self.dtype)  # an unknown dtype fails here, naming the supported ones
        if self.weight_sync not in ("shm", "nccl", "inprocess"):
            raise ValueError(f"weight_sync={self.weight_sync!r} is not supported; use shm (one machine), nccl "
                             "(a broadcast: NCCL on GPUs, gloo on CPUs) or inprocess (the in-process vllm backend)")
        if self.sleep_level not in (0, 1, 2) or self.tensor_parallel_size < 1:
            raise ValueError(f"sleep_level={self.sleep_level} must be 0, 1 or 2 and tensor_parallel_size="
                             f"{self.tensor_parallel_size} at least 1")
        if self.kv_cache_gb <= 0 or self.max_num_seqs < 1:
            raise ValueError(f"kv_cache_gb={self.kv_cache_gb} must be > 0 and max_num_seqs={self.max_num_seqs} >= 1")

    @classmethod
    def from_config(cls, rollout: RolloutConfig, dtype: str, seed: int = _TRAINER.seed) -> "EngineSettings":
        """The settings of a recipe's rollout section; `dtype` is model.dtype, `seed` trainer.seed."""
        return cls(dtype=dtype, seed=seed, kv_cache_gb=rollout.kv_cache_gb,
                   gpu_memory_utilization=rollout.gpu_memory_utilization,
                   enable_prefix_caching=rollout.enable_prefix_caching, max_num_seqs=rollout.max_num_seqs,
                   max_model_len=context_length(rollout), enforce_eager=rollout.enforce_eager,
                   weight_sync=rollout.weight_sync, tensor_parallel_size=rollout.tensor_parallel_size,
                   sleep_level=rollout.sleep_level if rollout.mode == "sync" and rollout.backend == "vllm" else 0)

    def replace(self, **changes) -> "EngineSettings":
        return replace(self, **changes)

    # ------------------------------------------------------------------ `gigpo serve` command line
    def cli_args(self) -> list[str]:
        """These settings as `gigpo serve` options (parsed back by `from_cli`)."""
        args = ["--dtype", self.dtype, "--seed", str(self.seed), "--kv-cache-gb", str(self.kv_cache_gb),
                "--gpu-memory-utilization", str(self.gpu_memory_utilization), "--max-num-seqs", str(self.max_num_seqs),
                "--weight-sync", self.weight_sync]
        if not self.enable_prefix_caching:
            args.append("--no-prefix-caching")
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.tensor_parallel_size > 1:
            raise ValueError(f"tensor_parallel_size={self.tensor_parallel_size} shards an in-process engine over the "
                             "trainer's ranks; `gigpo serve` runs one engine per server: use rollout.backend=vllm")
        if self.max_lora_rank is not None:
            raise ValueError("max_lora_rank is set, but `gigpo serve` has no adapter route: serve adapters "
                             "with the in-process vllm backend, or sync merged weights to the server")
        return args

    @staticmethod
    def add_cli_options(parser: "argparse.ArgumentParser") -> None:
        """The `gigpo serve` options, with these settings' defaults."""
        d = EngineSettings()
        parser.add_argument("--dtype", default=d.dtype, choices=["bf16", "fp32"])
        parser.add_argument("--seed", type=int, default=d.seed)
        parser.add_argument("--kv-cache-gb", type=float, default=d.kv_cache_gb)
        parser.add_argument("--gpu-memory-utilization", type=float, default=d.gpu_memory_utilization)
        parser.add_argument("--no-prefix-caching", action="store_true", default=not d.enable_prefix_caching)
        parser.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
        parser.add_argument("--max-model-len", type=int, default=d.max_model_len)
        parser.add_argument("--enforce-eager", action="store_true", default=d.enforce_eager,
                            help="skip torch.compile (faster start, slower generation)")
        parser.add_argument("--weight-sync", default=d.weight_sync, choices=["shm", "nccl"],
                            help="shm: trainer posts a /dev/shm safetensors path; nccl: trainer broadcasts (NCCL or gloo)")

    @classmethod
    def from_cli(cls, args: "argparse.Namespace") -> "EngineSettings":
        return cls(dtype=args.dtype, seed=args.seed, kv_cache_gb=args.kv_cache_gb,
                   gpu_memory_utilization=args.gpu_memory_utilization,
                   enable_prefix_caching=not args.no_prefix_caching, max_num_seqs=args.max_num_seqs,
                   max_model_len=args.max_model_len, enforce_eager=args.enforce_eager,
                   weight_sync=args.weight_sync)


def context_length(rollout: RolloutConfig) -> int:
    """Longest sequence the engine must hold: a rollout step, or the sync probe when verification is on."""
    length = rollout.max_prompt_tokens + rollout.max_new_tokens
    if rollout.verify_sync:
        from gigpo.rollout.weight_sync.verify import PROBE_NEW_TOKENS, PROBE_PROMPT_TOKENS

        length = max(length, PROBE_PROMPT_TOKENS + PROBE_NEW_TOKENS)
    return length
