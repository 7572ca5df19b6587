"""Which training rollouts ask the generator for log-probs (vLLM pays a full-vocabulary log-softmax and a
Python object per token for them), and that whatever reads them refuses their absence instead of guessing."""
from __future__ import annotations

import pytest

from gigpo.config import build_config
from gigpo.trainer.setup import sampling


def _asks(overrides: dict, iterations=range(1, 5)) -> list[bool]:
    config = build_config({"model": {"init": "tiny", "dtype": "bf16"}, **overrides})
    return [sampling(config, evaluation=False, seed=0, iteration=i).logprobs for i in iterations]


@pytest.mark.parametrize("overrides,expected", [
    ({}, [True] * 4),  # the gap metric every iteration: today's default
    ({"rollout": {"backend": "vllm", "logp_gap_every": 0}}, [False] * 4),
    ({"rollout": {"backend": "vllm", "logp_gap_every": 3}}, [True, False, False, True]),  # iterations 1 and 4
    ({"rollout": {"backend": "vllm", "logp_gap_every": 0}, "algorithm": {"rollout_correction": "token"}}, [True] * 4),
    ({"rollout": {"backend": "vllm", "logp_gap_every": 0, "mode": "async"}}, [True] * 4),  # async's correction
    ({"rollout": {"backend": "vllm", "logp_gap_every": 0, "temperature": 1.0},
      "trainer": {"old_logprobs": "generator"}}, [True] * 4),
])
def test_training_rollouts_ask_for_log_probs_only_where_something_reads_them(overrides, expected):
    assert _asks(overrides) == expected
    config = build_config({"model": {"init": "tiny"}, **overrides})
    assert sampling(config, evaluation=True, seed=0).logprobs is False  # evaluation reads none
    assert sampling(config, evaluation=False, seed=0).logprobs is True  # no iteration named: the safe side


def test_logp_gap_every_must_not_be_negative():
    with pytest.raises(ValueError, match="logp_gap_every"):
        build_config({"model": {"init": "tiny"}, "rollout": {"logp_gap_every": -1}})
