"""Where gigpo keeps built and converted models: a leaf module, so the builders can share it without
importing each other."""
from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """$GIGPO_CACHE/models, or ~/.cache/gigpo/models."""
    return Path(os.environ.get("GIGPO_CACHE", Path.home() / ".cache" / "gigpo")) / "models"
