"""A tiny GGUF file written from the local tiny Qwen2 model, so `gigpo model convert` runs on a real file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def write_tiny_gguf(model_dir: Path, out: Path, chat_template: Optional[str]) -> Path:
    """The tiny model (random fp32 weights) and its byte-level BPE tokenizer as a qwen2 GGUF file, with
    `chat_template` as its `tokenizer.chat_template` field, or no such field (a base model's upload)."""
    import gguf
    import torch
    from transformers import AutoConfig

    from safetensors.torch import load_file

    config = AutoConfig.from_pretrained(model_dir)
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = dict(tokenizer["model"]["vocab"])
    for added in tokenizer["added_tokens"]:
        vocab[added["content"]] = added["id"]
    special = {a["content"] for a in tokenizer["added_tokens"] if a["special"]}
    tokens = [f"<|unused_{i}|>" for i in range(config.vocab_size)]  # the embedding has rows no token uses
    for text, index in vocab.items():
        tokens[index] = text
    types = [gguf.TokenType.CONTROL if (t in special or t.startswith("<|unused_")) else gguf.TokenType.NORMAL
             for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]

    writer = gguf.GGUFWriter(str(out), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<|endoftext|>"])
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, tensor in load_file(str(model_dir / "model.safetensors")).items():
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        writer.add_tensor(gguf_name, tensor.to(torch.float32).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
