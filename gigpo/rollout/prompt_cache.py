"""Prompt KV kept across `generate` calls of the HF backend while the weights stay the same.

A rollout calls `generate` once per turn, and later turns show many prompts an earlier turn already
ran: an episode that bumps into a wall sees its state again, and the episodes of a group meet in the
same states. On sokoban_tiny a rollout's 8 calls held 537 distinct prompts, of which 216 were new to
the rollout (benchmarks/bench_prefill.py). Keeping each prompt's keys and values for the rest of the
rollout lets the prefill run only the new ones. Least recently used entries go first once the byte
budget is full. The store is emptied when the rollout ends (so it takes no memory from the log-prob and
update phases) and whenever the weights change (every entry is then stale).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional

from torch import Tensor

LayerKV = list[tuple[Tensor, Tensor]]
"""One prompt's cache: per layer, keys and values of shape (kv_heads, tokens, head_dim)."""


def kv_bytes(layers: LayerKV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)


class PromptKVStore:
    """Token prefix -> its per-layer KV, least recently used first out, at most `max_bytes` in all."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes={max_bytes} must be >= 0 (0 keeps nothing)")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[int, ...], LayerKV] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, prefix: tuple[int, ...]) -> Optional[LayerKV]:
        layers = self._entries.get(prefix)
        if layers is not None:
            self._entries.move_to_end(prefix)
        return layers

    def put(self, prefix: tuple[int, ...], layers: LayerKV) -> None:
        size = kv_bytes(layers)
        if size > self.max_bytes or prefix in self._entries:
            return
        while self.bytes + size > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= kv_bytes(old)
        self._entries[prefix] = layers
        self.bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
