"""Deterministic anchor keys: the same state text gives the same int64 in every process and run.

Python's `hash(str)` is salted per process (PYTHONHASHSEED), so groups computed by two workers, or
recomputed later from a dump, would not match. The rollout calls `anchor_key` once per observation,
when it arrives, so estimators only ever compare integers.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np


def anchor_key(text: str) -> int:
    """A signed 64-bit key of `text`: the first 8 bytes of its BLAKE2b digest (UTF-8), little-endian."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def anchor_keys(texts: Iterable[str]) -> np.ndarray:
    """(N,) int64 keys of many texts (same values as `anchor_key`)."""
    return np.fromiter((anchor_key(t) for t in texts), dtype=np.int64)
