"""`model.path` / `model.init` -> the directory or hub id every loader gets."""
from __future__ import annotations

from pathlib import Path
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


def check_model_path(path: Optional[str]) -> None:
    """RecipeError, before any process starts, when `model.path` names a directory that is not there.

    A Hugging Face hub id ("Qwen/Qwen2.5-7B-Instruct") or a pinned name passes; a value that can only be a
    filesystem path (absolute, ./ or ~ first, or more than one '/') must exist, or transformers answers deep in
    a traceback with "Repo id must be in the form 'repo_name'"."""
    from gigpo.config import RecipeError
    from gigpo.models.pretrained import PINNED

    if not path or path in PINNED or Path(path).expanduser().exists():
        return
    if path.startswith(("/", ".", "~")) or path.count("/") > 1:
        raise RecipeError(f"model.path={path!r}: no such directory. Give a Hugging Face model directory "
                          f"(config.json, tokenizer and weights), a hub id such as Qwen/Qwen2.5-7B-Instruct, a pinned "
                          f"model ({', '.join(sorted(PINNED))}), or drop model.path and set model.init for a local build")
