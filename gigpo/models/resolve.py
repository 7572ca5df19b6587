"""`model.path` / `model.init` -> the directory or hub id every loader gets."""
from __future__ import annotations

from typing import Optional


def resolve_model_path(path: Optional[str], init: Optional[str], corpus: Optional[str] = None, seed: int = 0) -> str:
    """What every loader gets: an HF id or directory as given, a pinned pretrained model's cached
    conversion (fetched on first use, gigpo.models.pretrained), or the cached local build (gigpo.models.local)."""
    if path:
        from gigpo.models.pretrained import resolve_pinned

        pinned = resolve_pinned(path)
        return str(pinned) if pinned is not None else path
    if init:
        from gigpo.models.local import cached_local_model

        return str(cached_local_model(init, corpus, seed))
    raise ValueError("no model: set model.path or model.init")
