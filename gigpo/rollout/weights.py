"""Turn the trainer's named parameters into what a generator loads: a full state dict in a file.

On CPU, weights reach vLLM (in-process engine core or a server) as a safetensors file in /dev/shm
(RAM-backed, so writing is a memory copy): torch tensors passed through vLLM's RPC arrive as nested
lists, and a path is cheap to post over HTTP.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Iterable, Optional

import torch

LM_HEAD, EMBED = "lm_head.weight", "model.embed_tokens.weight"


def shm_dir() -> Path:
    """RAM-backed directory for weight files: /dev/shm if present, else the temp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def full_state_dict(named_tensors: Iterable[tuple[str, torch.Tensor]], tied_lm_head: bool,
                    dtype: Optional[torch.dtype] = None) -> dict[str, torch.Tensor]:
    """Detached, contiguous, non-aliasing copies, cast to `dtype`; adds the LM head when it is tied.

    vLLM on CPU keeps its own packed copy of a tied LM head, so the head must be sent even when the
    trainer's parameters list only the embedding. safetensors refuses tensors sharing storage, hence
    the copies.
    """
    out: dict[str, torch.Tensor] = {}
    for name, tensor in named_tensors:
        name = name.removeprefix("module.")  # DeepSpeed / DDP wrappers
        t = tensor.detach()
        out[name] = (t.to(dtype) if dtype is not None else t).contiguous().clone()
    if needs_tied_head(set(out), tied_lm_head):
        out[LM_HEAD] = out[EMBED].clone()
    return out


def needs_tied_head(names: set[str], tied_lm_head: bool) -> bool:
    """Whether the sync must add `lm_head.weight` from the embedding; raises on an empty or headless
    untied set of names (both mean the caller did not pass all of the trainer's parameters)."""
    if not names:
        raise ValueError("update_weights got no tensors; pass model.named_parameters() of the trainer's model")
    if LM_HEAD in names or EMBED not in names:
        return False
    if not tied_lm_head:
        raise ValueError(f"update_weights got {EMBED} but no {LM_HEAD}, and this model does not tie them: "
                         "pass every parameter of the trainer's model")
    return True


def ties_lm_head(model_path: str) -> bool:
    """Whether the model at `model_path` shares its LM head with the input embedding."""
    from transformers import AutoConfig

    return bool(getattr(AutoConfig.from_pretrained(model_path), "tie_word_embeddings", False))


def write_weights_file(state: dict[str, torch.Tensor], directory: Optional[Path] = None) -> Path:
    """Save `state` as safetensors in shared memory; the caller deletes the file when done with it."""
    from safetensors.torch import save_file

    path = (directory or shm_dir()) / f"gigpo-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}.safetensors"
    save_file(state, str(path))
    return path
