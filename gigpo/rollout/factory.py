"""Pick and build the generator backend a recipe names. Backends import the interface
(gigpo.rollout.generator), never this module, so there is no import cycle."""
from __future__ import annotations

from typing import Iterable, Optional

from gigpo.config import RolloutConfig, TrainerConfig
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.generator import AUTO_TURNS, Generator, resolve_turns

__all__ = ["AUTO_TURNS", "BACKENDS", "generator_from_config", "make_generator"]
BACKENDS = ("hf", "vllm", "vllm-server")
_DEFAULTS = RolloutConfig()


def make_generator(backend: str, model_path: str, engine: EngineSettings = EngineSettings(), *,
                   server_urls: Iterable[str] = tuple(_DEFAULTS.server_urls), num_servers: int = _DEFAULTS.num_servers,
                   request_timeout_s: float = _DEFAULTS.request_timeout_s,
                   server_token: Optional[str] = None) -> Generator:
    """Build the generator for `backend` ("hf", "vllm" or "vllm-server") on the model at `model_path`."""
    if backend == "hf":
        from gigpo.rollout.hf_backend import HFGenerator

        return HFGenerator(model_path, dtype=engine.dtype, max_batch_size=engine.max_num_seqs,
                           prompt_cache_bytes=int(engine.kv_cache_gb * 2**30) if engine.enable_prefix_caching else 0)
    if backend == "vllm":
        from gigpo.rollout.vllm_backend import VLLMGenerator

        return VLLMGenerator(model_path, engine)
    if backend == "vllm-server":
        from gigpo.rollout.server_client import ServerGenerator

        return ServerGenerator(model_path, engine, urls=list(server_urls), num_servers=num_servers,
                               request_timeout_s=request_timeout_s, token=server_token)
    raise ValueError(f"unknown rollout backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def generator_from_config(rollout: RolloutConfig, model_path: str, dtype: str,
                          seed: int = TrainerConfig().seed) -> Generator:
    """The generator of a recipe's rollout section (`dtype`: model.dtype, `seed`: trainer.seed), with the
    rollout's `turns` resolved."""
    generator = make_generator(rollout.backend, model_path, EngineSettings.from_config(rollout, dtype, seed),
                               server_urls=rollout.server_urls, num_servers=rollout.num_servers,
                               request_timeout_s=rollout.request_timeout_s)
    generator.turns = resolve_turns(rollout.turns, rollout.backend, rollout.tensor_parallel_size)
    return generator
