"""Checkpoints a crash cannot corrupt: `run_dir/checkpoints/<iteration>/` appears complete or not at all.

Layout of one checkpoint (names are relied on by scripts and users):
    hf/               the actor as a Hugging Face model + tokenizer (safetensors): transformers, vLLM
                      (with LoRA: the base with the adapters merged in, under the base's names)
    adapter/          with LoRA only: the adapters in peft's format (PeftModel.from_pretrained)
    ds/actor/         DeepSpeed checkpoint: weights, optimizer, LR scheduler (ds/critic/ for PPO);
                      with LoRA the trainable tensors only (the frozen base is the run's model)
    rng/rank<R>.pt    Python, NumPy and torch RNG states of each rank
    meta.json         iteration, world size and the loop state the caller passed (written last)

Everything is written into `checkpoints/.tmp-<iteration>/`, fsynced, then renamed into place; a
directory without meta.json, or any `.tmp-*`, is never returned by `latest_checkpoint`. All ranks
call `save_checkpoint`/`load_checkpoint` together (DeepSpeed and ZeRO-3 weight gathering are
collective); rank 0 writes the shared files.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from gigpo.config import TrainerConfig
from gigpo.trainer import lora
from gigpo.trainer.distributed import barrier, rank_info

FORMAT_VERSION = 1
CHECKPOINTS = "checkpoints"
META = "meta.json"


@dataclass
class CheckpointState:
    """What a resumed run continues from."""

    path: Path
    iteration: int
    loop_state: dict[str, Any] = field(default_factory=dict)


def _complete_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(p.name), p) for p in root.iterdir() if p.name.isdigit() and (p / META).is_file()]
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Optional[Path]:
    """The newest complete checkpoint of a run (for `--resume`), or None if there is none."""
    found = _complete_checkpoints(run_dir)
    return found[-1][1] if found else None


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under root to disk, so the rename publishes durable data."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_hf(actor: Any, tokenizer: Any, out: Path, is_main: bool) -> None:
    """Full weights (gathered layer by layer under ZeRO-3) saved by rank 0 with save_pretrained."""
    state = {}
    for name, tensor in actor.named_weights(include_tied=False):
        if is_main:
            state[name] = tensor
    if is_main:
        module = actor.hf_module()
        if lora.is_lora(module):
            lora.save_merged(module, state, out)
        else:
            module.save_pretrained(out, state_dict=state, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)


_TRAINER = TrainerConfig()


def save_checkpoint(run_dir: str | Path, iteration: int, actor: Any, tokenizer: Any = None, critic: Any = None,
                    loop_state: Optional[dict[str, Any]] = None, keep_last: int = _TRAINER.keep_last) -> Path:
    """Write checkpoint `iteration` atomically and keep only the newest `keep_last`; all ranks call.

    `loop_state` must be JSON-serialisable (seeds drawn so far, counters, ...); it comes back from
    `load_checkpoint` unchanged.
    """
    if keep_last < 1:
        raise ValueError(f"trainer.keep_last={keep_last} must be at least 1")
    info = rank_info()
    root = Path(run_dir) / CHECKPOINTS
    tmp, final = root / f".tmp-{iteration}", root / str(iteration)
    json.dumps(loop_state or {})  # fail before writing anything if it cannot be stored
    if info.is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a crash: never trusted
        (tmp / "rng").mkdir(parents=True)
    barrier()
    actor.save_state(str(tmp / "ds"), "actor")
    if critic is not None:
        critic.save_state(str(tmp / "ds"), "critic")
    _save_hf(actor, tokenizer, tmp / "hf", info.is_main)
    if lora.is_lora(actor.hf_module()):
        lora.save_adapter(actor.hf_module(), tmp / "adapter", actor.settings.zero_stage == 3, info.is_main)
    torch.save(_rng_state(), tmp / "rng" / f"rank{info.rank}.pt")
    barrier()
    if info.is_main:
        meta = {"format": FORMAT_VERSION, "iteration": iteration, "world_size": info.world_size,
                "critic": critic is not None, "loop_state": loop_state or {}}
        (tmp / META).write_text(json.dumps(meta, indent=1))
        _fsync_tree(tmp)
        if final.exists():  # re-saving an iteration (e.g. after a resume): replace it whole
            old = root / f".old-{iteration}"
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old)
        else:
            tmp.rename(final)
        _fsync_dir(root)
        for _, path in _complete_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(path)
    barrier()
    return final


def load_checkpoint(path: str | Path, actor: Any, critic: Any = None) -> CheckpointState:
    """Restore weights, optimizer, scheduler and this rank's RNG from a checkpoint; all ranks call."""
    path = Path(path)
    meta_file = path / META
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete gigpo checkpoint (no {META}); "
                                f"use latest_checkpoint(run_dir) to find one")
    meta = json.loads(meta_file.read_text())
    info = rank_info()
    if meta["world_size"] != info.world_size:
        raise ValueError(f"checkpoint {path} was written by {meta['world_size']} ranks, this run has "
                         f"{info.world_size}; resume with trainer.nprocs={meta['world_size']}")
    actor.load_state(str(path / "ds"), "actor")
    if critic is not None:
        if not meta.get("critic"):
            raise ValueError(f"checkpoint {path} has no critic, but this run trains one (PPO)")
        critic.load_state(str(path / "ds"), "critic")
    _set_rng_state(torch.load(path / "rng" / f"rank{info.rank}.pt", weights_only=False))
    return CheckpointState(path, int(meta["iteration"]), meta.get("loop_state", {}))
