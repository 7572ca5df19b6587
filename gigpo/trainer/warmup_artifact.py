"""A supervised warm-up saved once as an artifact (`trainer.sft_artifact` and `trainer.sft_artifact_sha256`).

Why: a warm-up rebuilt from the same recipe is the same only where the arithmetic is the same. WebShop's third
pair showed it: a rebuild on another machine started RL at 28.2% success instead of 23.1%, so that pair could not
be set beside the others. A recipe that names an artifact by its sha256 starts every run, on any machine and
day, from the same weights, and a run whose artifact differs stops before any engine starts.

`gigpo warmup RECIPE --out DIR` writes one (the recipe's own warm-up, as `gigpo train` builds it) and prints the
two lines for the recipe. The digest covers every file of the folder (weights, config, tokenizer) by relative
path and content, so a tokenizer swapped beside the same weights is caught too.

Two kinds: a whole Hugging Face model, or (a warm-up with `trainer.sft_lora_rank`) LoRA adapters with the digest
of the base weights they were trained on, merged into `model.path` at install (gigpo/trainer/warmup_lora.py).
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Optional

from gigpo.config import RecipeError

#: Written beside the weights by `save_artifact`; not part of the digest.
DIGEST_FILE = "SHA256"


def artifact_sha256(folder: Path) -> str:
    """sha256 over the folder's files in sorted relative-path order, each as its path, a NUL, its size and bytes.
    The folder's own name and location do not count: a copy anywhere has the same digest."""
    folder = Path(folder)
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() != DIGEST_FILE)
    if not files:
        raise RecipeError(f"warm-up artifact {folder}: no files (is the path right?)")
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.stat().st_size.to_bytes(8, "little"))
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def save_artifact(hf_dir: Path, out: Path) -> str:
    """Copy a warm-up's HF folder to `out` (which must not exist: an artifact is written once) with its digest
    in out/SHA256; return the digest."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists: a warm-up artifact is written once; choose a new folder or remove it")
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(hf_dir, staging)
    digest = artifact_sha256(staging)
    (staging / DIGEST_FILE).write_text(digest + "\n")
    staging.rename(out)  # all or nothing: an interrupted save leaves no folder that looks complete
    return digest


def install_artifact(folder: str, sha256: str, warm_dir: Path, base_path: Optional[str] = None) -> Path:
    """Check the artifact against the recipe's digest and put it in warm_dir/hf, where the run's warm-up lives
    (so `gigpo compare`'s warm-up digests, `gigpo eval` and resume see it as any warm-up): a model is copied,
    LoRA adapters are merged into `base_path` (the recipe's model) after checking it is their base."""
    from gigpo.trainer.warmup_lora import check_base, merge_into_base

    source = Path(folder).expanduser()
    adapters = (source / "adapter_config.json").is_file()
    if not adapters and not (source / "config.json").is_file():
        raise RecipeError(f"trainer.sft_artifact={folder}: neither a Hugging Face model (config.json) nor LoRA "
                          "adapters (adapter_config.json) there; write one with `gigpo warmup RECIPE --out DIR` or "
                          "fix the path (relative paths are read from the directory gigpo runs in)")
    if adapters and base_path is None:
        raise ValueError("install_artifact: LoRA adapters need the base model's path")
    found = artifact_sha256(source)
    if found != sha256.lower():
        raise RecipeError(f"trainer.sft_artifact={folder} has sha256 {found}, but the recipe's "
                          f"trainer.sft_artifact_sha256 is {sha256}: these are not the weights the recipe's runs "
                          "started from; restore the artifact, or if it was rebuilt on purpose, put the new digest "
                          "in the recipe (runs from the two are not comparable)")
    target = Path(warm_dir) / "hf"
    staging = Path(warm_dir) / "hf.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    if adapters:
        check_base(source, base_path, folder)
        merge_into_base(base_path, source, staging)
    else:
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(DIGEST_FILE))
    staging.rename(target)
    print(f"warm-up: the artifact {folder} (sha256 {found[:16]}...)", flush=True)
    return target
