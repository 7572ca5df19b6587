"""The tie-robust greedy comparison fails where answers part at a clear choice, and passes within its bound."""
from __future__ import annotations

import pytest
import torch

from gigpo.rollout.hf_backend import HFGenerator

from support.greedy import assert_greedy_matches, tokens

from .conftest import GREEDY, sample_prompts


def test_answers_that_part_at_a_clear_choice_fail(tiny_model_dir):
    hf = HFGenerator(str(tiny_model_dir), dtype="fp32")
    prompts = sample_prompts(2, seed=3)
    expected = tokens(hf.generate(prompts, GREEDY))
    assert_greedy_matches(hf.model, prompts, expected, expected)
    with torch.no_grad():
        logp = torch.log_softmax(hf.model(torch.tensor([prompts[0]])).logits[0, -1], dim=-1)
    worst = int(logp.argmin())  # the least likely first token: a wrong model, not a near-tie
    wrong = [[worst] + expected[0][1:], expected[1]]
    with pytest.raises(AssertionError, match="no near-tie"):
        assert_greedy_matches(hf.model, prompts, wrong, expected)
    # the bound alone decides: one wide enough accepts the same parting
    assert_greedy_matches(hf.model, prompts, wrong, expected, near_tie=float("inf"))
