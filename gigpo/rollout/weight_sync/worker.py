"""Code that runs inside vLLM's worker process (passed as `worker_extension_cls`).

Method names carry a `gigpo_` prefix: vLLM's worker already has an `update_weights`.
"""
from __future__ import annotations

import logging

from gigpo.infra.owner_watch import watch_owner

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
DERIVED_BUFFER_LAYERS = frozenset({"RotaryEmbedding"})
"""Layers whose tensors are computed at start (rotary's cos/sin table), never part of a checkpoint."""


def drop_derived_layer_warnings(record: logging.LogRecord) -> bool:
    """A logging filter: False for vLLM's "Failed to load weights" about a layer with only derived tensors.

    vLLM's layer-wise reload warns for every layer that received no weights. Rotary embeddings never
    receive any (their table is recomputed, and vLLM puts it back), so every sync printed a warning that
    looked like a fault. The warning still shows for any other layer: there it means a missing weight.
    """
    return not (record.msg == "%s: Failed to load weights" and record.args
                and record.args[0] in DERIVED_BUFFER_LAYERS)


def install_reload_warning_filter() -> None:
    """Add the filter to vLLM's reload logger once per process (the worker's)."""
    logger = logging.getLogger(RELOAD_LOGGER)
    if drop_derived_layer_warnings not in logger.filters:
        logger.addFilter(drop_derived_layer_warnings)


watch_owner()  # imported as vLLM's worker starts: end with the trainer or server that built the engine


class WeightSyncExtension:
    """Mixed into vLLM's worker: reload all weights from a safetensors file the trainer wrote, or from a
    broadcast the trainer sends (gigpo/rollout/weight_sync/broadcast.py). Uses only what vLLM 0.26-0.33 all have:
    `worker_extension_cls`, `self.rank`, `self.device` and `reload_weights(weights_iterator=...)`."""

    def gigpo_load_weights(self, path: str, skip_lm_head: bool = False) -> int:
        """Load `path` through `reload_weights`, which re-packs weights the CPU backend repacked at
        start (a plain `model.load_weights` writes into emptied tensors there). Returns the count."""
        from safetensors.torch import load_file

        install_reload_warning_filter()
        state = load_file(path)
        if skip_lm_head:  # fault injection for tests: leaves the engine's packed LM head stale
            state.pop("lm_head.weight", None)
        self.reload_weights(weights_iterator=iter(state.items()))
        return len(state)

    def gigpo_load_tensors(self, named_tensors) -> int:
        """Load an iterator of (name, tensor) from the trainer's own process (weight_sync="inprocess", where
        the engine core runs in the trainer's process and this call is direct). vLLM's layer-wise reload
        holds a tensor until its layer's other tensors came (q, k, v), then copies them into its own
        weights. Returns the count."""
        count = 0

        def counted():
            nonlocal count
            for item in named_tensors:
                count += 1
                yield item

        install_reload_warning_filter()
        self.reload_weights(weights_iterator=counted())
        return count

    def gigpo_init_broadcast(self, info: dict) -> None:
        """Join the trainer's weight-sync group as rank 1 + this worker's rank (blocks until all joined)."""
        from gigpo.rollout.weight_sync.broadcast import open_group

        self.gigpo_backend = info["backend"]
        self.gigpo_group = open_group(info["address"], int(info["port"]), 1 + self.rank, int(info["world_size"]),
                                      info["backend"], float(info["timeout_s"]))

    def gigpo_receive_broadcast(self, meta: list) -> int:
        """Receive the tensors `meta` names as the trainer broadcasts them, loading each as it comes."""
        from gigpo.rollout.weight_sync.broadcast import receive_iterator

        if getattr(self, "gigpo_group", None) is None:
            raise RuntimeError("gigpo_receive_broadcast before gigpo_init_broadcast: no weight-sync group")
        install_reload_warning_filter()
        self.reload_weights(weights_iterator=receive_iterator(self.gigpo_group, meta, self._gigpo_device()))
        return len(meta)

    def _gigpo_device(self):
        """Where received tensors land: the worker's GPU for NCCL; host memory for gloo (reload_weights
        copies them onto the GPU parameters)."""
        import torch

        device = getattr(self, "device", None)
        if self.gigpo_backend == "gloo" or not isinstance(device, torch.device):
            return torch.device("cpu")
        return device
