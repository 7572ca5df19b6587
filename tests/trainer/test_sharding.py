"""The rollout split over ranks (gigpo.trainer.sharding): shares of the task groups, played apart and merged,
give the groups, rows, advantages and metrics of one rollout of every group."""
from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pytest

from gigpo.rollout.collect import rollout
from gigpo.rollout.types import SamplingSettings
from gigpo.trainer.samples import with_advantages
from gigpo.trainer.sharding import (Share, advantage_part, merge_advantage_parts, merge_metrics, merge_rollouts,
                                    playing_ranks, split_groups)
from support.sokoban_pool import sokoban_tiny_pool


def test_shares_are_contiguous_cover_every_item_once_and_differ_by_at_most_one():
    for count in range(0, 9):
        for ranks in range(1, 5):
            shares = [Share(r, ranks).of(count) for r in range(ranks)]
            assert [i for s in shares for i in s] == list(range(count))
            assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert Share().of(5) == range(5)  # one rank plays everything
    with pytest.raises(ValueError, match="rank 2 of 2 playing ranks"):
        Share(2, 2).of(4)


def test_in_process_backends_play_on_every_rank_and_a_server_is_fed_by_rank_0():
    assert playing_ranks("hf", 1, 4) == Share(1, 4) and playing_ranks("vllm", 3, 4) == Share(3, 4)
    assert playing_ranks("vllm", 0, 1) == Share(0, 1)
    assert playing_ranks("vllm-server", 0, 4) == Share(0, 1) and playing_ranks("vllm-server", 2, 4) is None
    # an engine over two ranks is one player: both ranks play its share, and split its rows for training
    assert [playing_ranks("vllm", r, 4, tensor_parallel_size=2) for r in range(4)] == \
        [Share(0, 2, 0, 2), Share(0, 2, 1, 2), Share(1, 2, 0, 2), Share(1, 2, 1, 2)]
    first, second = Share(0, 2, 0, 2), Share(0, 2, 1, 2)
    assert first.reports and not second.reports
    assert first.own_rows(5).tolist() == [True, False, True, False, True]
    assert (first.own_rows(5) ^ second.own_rows(5)).all()  # every row trained once
    assert Share(1, 4).own_rows(3).all()


def assert_same_steps(got, want, logprob_atol: float = 1e-5) -> None:
    """Two StepRows hold the same steps in the same order: every column present in both equal, the behaviour
    log-probs within float rounding (a share's calls are narrower)."""
    assert len(got) == len(want)
    for name, column in got.columns().items():
        other = getattr(want, name)
        if column is None or other is None:
            continue
        if name == "behaviour_logprobs":
            for mine, one in zip(column, other):
                np.testing.assert_allclose(mine, one, rtol=0, atol=logprob_atol)
        elif isinstance(column, np.ndarray):
            np.testing.assert_array_equal(column, other, err_msg=name)
        else:
            assert column == other, name


@pytest.fixture(scope="module")
def sokoban(tiny_model_dir):
    from gigpo.rollout.hf_backend import HFGenerator

    with sokoban_tiny_pool(tiny_model_dir, workers=1) as (config, pool, batch_token_ids):
        yield config, pool, batch_token_ids, HFGenerator(str(tiny_model_dir), dtype="fp32")


def test_shares_played_apart_and_merged_equal_one_rollout_of_every_group(sokoban):
    """Greedy hf: a sampled hf turn is seeded as a whole call, so only greedy (or per-request seeds, the vLLM
    backend's async turns) makes a row's draw independent of which other rows share its call."""
    config, pool, prompt_fn, generator = sokoban
    seeds, group_size = [11, 12, 13, 14, 15], 3
    settings = SamplingSettings(temperature=0.0, max_new_tokens=8, seed=5)
    play = lambda part, offset: rollout(pool, generator, prompt_fn, part, group_size, settings,  # noqa: E731
                                        config.rollout.max_prompt_tokens, group_offset=offset)
    whole = play(seeds, 0)
    shares = [Share(r, 2).of(len(seeds)) for r in range(2)]
    parts = [play(seeds[s.start:s.stop], s.start) for s in shares]
    merged = merge_rollouts(parts)
    assert len({e.group for e in parts[1].episodes}) == 2 and min(e.group for e in parts[1].episodes) == 3
    assert_same_steps(merged.steps, whole.steps)
    assert [asdict(e) for e in merged.episodes] == [asdict(e) for e in whole.episodes]
    assert merged.tokens_generated == whole.tokens_generated
    # the merged metrics: counts summed, rates recomputed over every share's episodes
    got = merge_metrics([p.metrics() for p in parts], replace(merged, steps=merged.steps.select([])))
    assert got == pytest.approx(whole.metrics())
    assert got["rollout/episodes"] == 15 and got["rollout/env_steps"] == len(whole.steps)
    # advantages are group-local: each share's own equal the whole batch's rows
    algorithm = config.algorithm
    full = with_advantages(whole.steps, algorithm, split_versions=True)
    sent = []
    index = {(t, s): i for i, (t, s) in enumerate(zip(whole.steps.traj.tolist(), whole.steps.step.tolist()))}
    for part in parts:
        own = with_advantages(part.steps, algorithm, split_versions=True)
        rows = [index[key] for key in zip(part.steps.traj.tolist(), part.steps.step.tolist())]
        np.testing.assert_allclose(own.advantage, full.advantage[rows], rtol=0, atol=1e-12)
        sent.append(advantage_part(own, with_texts=True))
    assert np.abs(full.advantage).max() > 0  # the check above compared something
    assert sent[0].response_ids is None and sent[0].observation is not None  # numbers and texts, no tokens
    assert advantage_part(own, with_texts=False).observation is None
    # what each rank sends rank 0 for its diagnostics and records, put back: the whole batch's, in its order
    merged_rows = merge_advantage_parts([sent[1], None, sent[0]], len(seeds))
    assert_same_steps(merged_rows, whole.steps)
    for name in ("advantage", "episode_advantage", "step_advantage", "step_group_size", "returns"):
        np.testing.assert_allclose(getattr(merged_rows, name), getattr(full, name), rtol=0, atol=1e-12)
    # rank 0 alone played every group (a server): each rank gets the steps its share would have played
    split = split_groups(whole.steps, 2)
    for share, part in zip(split, parts):
        assert_same_steps(share, part.steps)
