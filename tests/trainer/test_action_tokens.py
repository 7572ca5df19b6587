"""The action-token mask: which response tokens spell the move, from the real tokenizers' decoding."""
from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from gigpo.trainer.action_tokens import action_token_mask


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.mark.parametrize("text, action", [
    ("<action>left</action>", "left"),
    ("<think>the box is up</think><action>up</action>", "up"),
    ("<action>search[red shoes]</action>", "search[red shoes]"),
    ("<action>café au lait</action>", "café au lait"),
])
def test_the_masked_tokens_decode_to_the_action_and_nothing_else_of_the_tags(tokenizer, text, action):
    ids = tokenizer.encode(text, add_special_tokens=False)
    mask = action_token_mask(tokenizer, ids)
    picked = tokenizer.decode([i for i, keep in zip(ids, mask) if keep])
    assert action in picked.strip() or picked.replace(" ", "") == action.replace(" ", "")
    assert "<action>" not in picked and "</action>" not in picked
    assert sum(mask) < len(ids)
    first, last = mask.index(True), len(mask) - 1 - mask[::-1].index(True)
    assert all(mask[first:last + 1])  # one contiguous run


def test_no_tags_or_an_empty_action_select_nothing(tokenizer):
    for text in ("just text", "<action></action>", "<action>left"):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert action_token_mask(tokenizer, ids) == [False] * len(ids)
