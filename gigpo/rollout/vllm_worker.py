"""Code that runs inside vLLM's worker process (passed as `worker_extension_cls`).

Method names carry a `gigpo_` prefix: vLLM's worker already has an `update_weights`.
"""
from __future__ import annotations


class WeightSyncExtension:
    """Mixed into vLLM's worker: reload all weights from a safetensors file the trainer wrote."""

    def gigpo_load_weights(self, path: str, skip_lm_head: bool = False) -> int:
        """Load `path` through `reload_weights`, which re-packs weights the CPU backend repacked at
        start (a plain `model.load_weights` writes into emptied tensors there). Returns the count."""
        from safetensors.torch import load_file

        state = load_file(path)
        if skip_lm_head:  # fault injection for tests: leaves the engine's packed LM head stale
            state.pop("lm_head.weight", None)
        self.reload_weights(weights_iterator=iter(state.items()))
        return len(state)
