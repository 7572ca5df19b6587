"""`gigpo warmup`: build the recipe's supervised warm-up and save it as an artifact (gigpo/trainer/warmup_artifact.py).
Apart from that module because it needs the run set-up (env pool, prompts), which itself installs artifacts."""
from __future__ import annotations

import tempfile
from pathlib import Path

from gigpo.config import RecipeError


def build_artifact(config, out: Path) -> str:
    """`gigpo warmup`: the recipe's warm-up exactly as `gigpo train` builds it (same demonstrations, seed and
    cache), saved to `out` as an artifact; returns its sha256."""
    from transformers import AutoTokenizer

    from gigpo.models.resolve import resolve_model_path
    from gigpo.trainer.setup import build_pool, build_prompt_fn
    from gigpo.trainer.sft_warm_start import sft_warm_start
    from gigpo.trainer.warmup_artifact import save_artifact
    from gigpo.trainer.warmup_lora import ADAPTER_DIR

    t = config.trainer
    if t.sft_artifact:
        raise RecipeError(f"the recipe already starts from the artifact {t.sft_artifact}; to build the warm-up "
                          "again, run with trainer.sft_artifact=null trainer.sft_artifact_sha256=null")
    if t.sft_steps < 1:
        raise RecipeError("trainer.sft_steps is 0: the recipe has no warm-up to save; set trainer.sft_steps")
    if Path(out).exists():
        raise RecipeError(f"--out {out} exists: a warm-up artifact is written once; choose a new folder")
    model_path = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".warmup-") as tmp, build_pool(config) as pool:
        sft_warm_start(config, model_path, pool, build_prompt_fn(config, tokenizer), tokenizer, Path(tmp))
        built = Path(tmp) / "hf"
        adapters = built / ADAPTER_DIR  # a LoRA warm-up (trainer.sft_lora_rank): the adapters are the artifact
        return save_artifact(adapters if adapters.is_dir() else built, Path(out))
