"""gigpo/infra/seeds.py: task seeds keep the values committed results were made with; sampling seeds never overlap."""
from __future__ import annotations

import pytest

from gigpo.config import load_config
from gigpo.infra.seeds import (REQUESTS_PER_CALL, demo_seeds, eval_seeds, rollout_sampling_seed, train_seeds, turn_seed,
                               sft_warmup_seed)


def test_task_seeds_are_the_values_runs_were_made_with():
    """The formulas before issue 27 moved them here, written out: a change would silently make new runs
    play other tasks than the committed results (and break paired comparisons across versions)."""
    config = load_config("recipes/sokoban_tiny.yaml", ["trainer.seed=3", "algorithm.max_resample=2",
                                                       "env.num_groups=16", "env.eval_episodes=5"])
    e = config.env
    assert train_seeds(config, 1) == list(range(e.train_seed_start + 30_000_000, e.train_seed_start + 30_000_016))
    # iteration 4, re-draw 2: slot (4 - 1) * (2 + 1) + 2 = 11
    assert train_seeds(config, 4, 2)[0] == e.train_seed_start + 3 * 10_000_000 + 11 * 16
    assert eval_seeds(config) == list(range(e.eval_seed_start, e.eval_seed_start + 5))
    assert sft_warmup_seed(config.trainer) == 3
    assert sft_warmup_seed(load_config("recipes/sokoban_tiny.yaml", ["trainer.sft_seed=7"]).trainer) == 7
    assert demo_seeds(e, 3, 4) == [e.train_seed_start + 5_000_000_000 + 300_000 + i for i in range(4)]
    assert rollout_sampling_seed(3, 5) == 3 * 100_003 + 5


def test_per_prompt_seeds_of_a_run_never_repeat_across_turns_draws_iterations_or_run_seeds():
    """vLLM seeds prompt i of a call seed + i. Every (run seed, iteration, draw, turn, prompt) of a
    realistic run gets its own seed (the old `seed * 1000 + turn` repeated them one turn later)."""
    requests = 128  # 16 groups x 8, this machine's recipes
    seen: set[int] = set()
    calls = 0
    for run_seed in range(3):
        for iteration in range(1, 21):
            for draw in range(3):
                for turn in range(8):
                    base = turn_seed(rollout_sampling_seed(run_seed, iteration, draw), turn, requests)
                    assert 0 <= base and base + requests < 2**63  # what torch and vLLM take as a seed
                    seen.update(range(base, base + requests))
                    calls += 1
    assert len(seen) == calls * requests


def test_a_turn_of_more_prompts_than_the_seed_range_is_refused():
    assert turn_seed(0, 0, REQUESTS_PER_CALL) >= 0
    with pytest.raises(ValueError, match="env.num_groups x env.group_size"):
        turn_seed(0, 0, REQUESTS_PER_CALL + 1)
