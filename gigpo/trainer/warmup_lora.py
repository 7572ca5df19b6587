"""A supervised warm-up that trains LoRA adapters (`trainer.sft_lora_rank`) and merges them into the base model.

Why: a fully fine-tuned SmolLM2-135M is 270-540 MB, more than a repository should hold, so its warm-up could not
be committed and every machine rebuilt its own (and WebShop's third pair started 5 points off). Its adapters are
a few MB. `gigpo warmup` saves only them, with the digest of the base weights they were trained on, and every
run merges them into that base the same way.

The merge is computed here, not by peft: each adapted weight is W + (B @ A) * alpha / r in float64, rounded once
to W's dtype. The products of float32 factors are exact in float64, so the result does not depend on a CPU's
matmul kernels: a run that built the warm-up and a run that installed its artifact on another machine start from
the same bytes, which is what `gigpo compare` pairs runs by.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from gigpo.config import RecipeError

ADAPTER_DIR = "adapter"
"""Where a LoRA warm-up keeps its adapters, inside the warm-up's Hugging Face folder (loaders ignore it)."""
BASE_DIGEST_FILE = "base_weights.sha256"
"""Beside the adapters: the sha256 of the base weights they were trained on (`base_weights_sha256`)."""
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", BASE_DIGEST_FILE)
_PEFT_PREFIX = "base_model.model."


def lora_for_warmup(model: torch.nn.Module, rank: int) -> torch.nn.Module:
    """`model` with rank-`rank` adapters (alpha 2 x rank) on every linear layer but a tied head, the only
    trainable parameters."""
    from gigpo.trainer.lora import ALL_LINEAR, LoraSettings, wrap

    return wrap(model, LoraSettings(rank=rank, alpha=2.0 * rank, dropout=0.0, target_modules=(ALL_LINEAR,)))


def base_weights_sha256(model_dir: str | Path) -> str:
    """sha256 over the model folder's top-level *.safetensors files (name and bytes, in name order): the weights
    only, so the same base fetched with other README or tokenizer files still matches."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise RecipeError(f"{model_dir}: no *.safetensors weights; a LoRA warm-up needs its base model as safetensors")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def save_adapters(model: torch.nn.Module, base_path: str | Path, out: Path) -> None:
    """The trained adapters in peft's format, with the base weights' digest, written so that equal adapters give
    equal files (sorted keys and target list, the base named by its folder name, no generated README)."""
    out = Path(out)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "README.md").unlink(missing_ok=True)
    config_path = out / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = Path(base_path).name
    config["target_modules"] = sorted(config["target_modules"]) if isinstance(config["target_modules"], list) \
        else config["target_modules"]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / BASE_DIGEST_FILE).write_text(base_weights_sha256(base_path) + "\n")


def merge_into_base(base_path: str | Path, adapter_dir: Path, out: Path) -> Path:
    """Load the base (float32), add every adapter's B @ A * alpha / r to its weight in float64, and save the merged
    model with the base's tokenizer to `out`."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_dir = Path(adapter_dir)
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    unsupported = [k for k in ("use_rslora", "use_dora", "fan_in_fan_out") if config.get(k)]
    if config.get("peft_type", "LORA") != "LORA" or unsupported or config.get("rank_pattern") or config.get("alpha_pattern"):
        raise RecipeError(f"{adapter_dir}: only plain LoRA adapters (one rank and alpha) can be merged here, not "
                          f"{unsupported or config.get('peft_type')}")
    scale = float(config["lora_alpha"]) / float(config["r"])
    factors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=torch.float32)
    params = dict(model.named_parameters())
    merged = 0
    with torch.no_grad():
        for key in sorted(factors):
            if not key.endswith(".lora_A.weight"):
                continue
            name = key.removeprefix(_PEFT_PREFIX).removesuffix(".lora_A.weight")
            weight = params.get(f"{name}.weight")
            b = factors.get(f"{_PEFT_PREFIX}{name}.lora_B.weight")
            if weight is None or b is None:
                raise RecipeError(f"{adapter_dir}: adapter {name} has no matching weight in the base {base_path}: "
                                  "these adapters were trained on another model")
            a = factors[key]
            delta = (b.double() @ a.double()) * scale
            weight.copy_((weight.double() + delta).to(weight.dtype))
            merged += 1
    if not merged:
        raise RecipeError(f"{adapter_dir}: no LoRA factors in adapter_model.safetensors")
    out = Path(out)
    model.save_pretrained(str(out), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(base_path)).save_pretrained(str(out))
    return out


def check_base(adapter_dir: Path, base_path: str | Path, artifact: str) -> None:
    """RecipeError unless the base model's weights are the ones the adapters were trained on."""
    expected = (Path(adapter_dir) / BASE_DIGEST_FILE).read_text().strip()
    found = base_weights_sha256(base_path)
    if found != expected:
        raise RecipeError(f"trainer.sft_artifact={artifact} holds LoRA adapters trained on base weights with sha256 "
                          f"{expected}, but model.path ({base_path}) has {found}: set model.path to the model the "
                          "artifact was made on (its adapter_config.json names it)")
