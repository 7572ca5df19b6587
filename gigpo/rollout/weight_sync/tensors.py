"""Turn the trainer's named parameters into what a generator loads: a full state dict in a file, or
(`engine_tensors`, the in-process path) a stream of the trainer's own tensors by reference.

On CPU, weights reach vLLM (in-process engine core or a server) as a safetensors file in /dev/shm
(RAM-backed, so writing is a memory copy): torch tensors passed through vLLM's RPC arrive as nested
lists, and a path is cheap to post over HTTP.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Iterable, Iterator, Optional

import torch

LM_HEAD, EMBED = "lm_head.weight", "model.embed_tokens.weight"


def shm_dir() -> Path:
    """RAM-backed directory for weight files: /dev/shm if present, else the temp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def full_state_dict(named_tensors: Iterable[tuple[str, torch.Tensor]], tied_lm_head: bool,
                    dtype: Optional[torch.dtype] = None) -> dict[str, torch.Tensor]:
    """Detached, contiguous tensors cast to `dtype`, none sharing storage with another; adds the LM head when
    it is tied. Every transport consumes the dict at once (a file write, or a copy into a model).

    vLLM on CPU keeps its own packed copy of a tied LM head, so the head must be sent even when the
    trainer's parameters list only the embedding. safetensors refuses tensors sharing storage, so a
    tensor is copied only where it shares its storage (a view into a flat buffer, as a bf16 engine's
    parameters are); the actor's `named_weights` yields host copies of their own, which pass as they are
    (a second full copy of the model was made here before).
    """
    out: dict[str, torch.Tensor] = {}
    for name, tensor in named_tensors:
        name = name.removeprefix("module.")  # DeepSpeed / DDP wrappers
        t = tensor.detach()
        t = (t.to(dtype) if dtype is not None else t).contiguous()
        out[name] = t if owns_its_storage(t) else t.clone()
    if needs_tied_head(set(out), tied_lm_head):
        out[LM_HEAD] = out[EMBED].clone()
    return out


def owns_its_storage(t: torch.Tensor) -> bool:
    """Whether `t` spans its whole storage: no other tensor can be a view of a different part of it (one
    that is the very same view of it, a tied weight listed twice, is caught by safetensors)."""
    return t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()


def engine_tensors(named_tensors: Iterable[tuple[str, torch.Tensor]], tied_lm_head: bool,
                   dtype: Optional[torch.dtype] = None) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors as a vLLM engine in this process loads them: by reference, on their own device, one at
    a time (a ZeRO-3 gather holds one module), cast only where the dtype differs; the embedding is sent
    again as `lm_head.weight` when the head is tied and the trainer lists none (a plain module's
    embedding is its parameter, so keeping it costs nothing; under ZeRO-3 the trainer's
    `named_weights` yields the head itself, gathered again).

    No copy is made here: the engine's `reload_weights` copies them into its own weights layer by layer
    (a tensor is held until its layer is complete; a released ZeRO-3 gather leaves a held tensor's
    storage alive, since the reference keeps it)."""
    names: set[str] = set()
    embed: Optional[torch.Tensor] = None
    for name, tensor in named_tensors:
        name = name.removeprefix("module.")  # DeepSpeed / DDP wrappers
        names.add(name)
        t = tensor.detach()
        t = t.to(dtype) if dtype is not None and t.dtype != dtype else t
        if name == EMBED:
            embed = t
        yield name, t
    if needs_tied_head(names, tied_lm_head):
        yield LM_HEAD, embed


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
