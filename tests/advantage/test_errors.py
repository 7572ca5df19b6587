"""Bad rows and options fail early, with a message naming the offending rows or option."""
from __future__ import annotations

import io

import numpy as np
import pytest

from gigpo.advantage import AdvantageInputError, StepRows, compute_advantages, parse_step_rows

GOOD = dict(group=[0, 0, 1], traj=[0, 1, 0], step=[0, 0, 0], reward=[1.0, 0.0, 1.0], anchor=[1, 2, 3])
OPTIONS = dict(gamma=0.95, lam=0.95, step_weight=1.0, norm="std", episode_stats="trajectory", similarity=None)


def rows(**changes) -> StepRows:
    return StepRows(**{**GOOD, **changes})


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_reward_names_the_row(bad):
    with pytest.raises(AdvantageInputError, match=r"'reward'.*rows 2"):
        rows(reward=[1.0, 0.0, bad])


def test_non_finite_value_names_the_rows():
    with pytest.raises(AdvantageInputError, match=r"'value'.*rows 0, 2"):
        rows(value=[np.nan, 0.0, np.inf])


def test_duplicate_step_names_both_rows():
    with pytest.raises(AdvantageInputError, match=r"rows 0 and 3 are the same step \(group=0, traj=0, step=0\)"):
        StepRows(group=[0, 0, 1, 0], traj=[0, 1, 0, 0], step=[0, 0, 0, 0], reward=[0] * 4, anchor=[0] * 4)


def test_same_traj_id_in_two_groups_is_not_a_duplicate():
    StepRows(group=[0, 1], traj=[0, 0], step=[0, 0], reward=[0, 0], anchor=[0, 0])


def test_missing_or_misshapen_fields():
    with pytest.raises(AdvantageInputError, match="missing the field 'anchor'"):
        rows(anchor=None)
    with pytest.raises(AdvantageInputError, match=r"'step' has shape \(2,\), expected \(3,\)"):
        rows(step=[0, 1])
    with pytest.raises(AdvantageInputError, match="'group' must hold integers"):
        rows(group=[0.5, 0, 1])
    with pytest.raises(AdvantageInputError, match="anchor_text has 1 entries, expected 3"):
        rows(anchor_text=["a"])


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5, float("nan")])
def test_similarity_threshold_outside_unit_interval_names_the_option(threshold):
    with pytest.raises(AdvantageInputError, match=r"similarity=.* is outside \(0, 1\]"):
        compute_advantages("gigpo", rows(anchor_text=["a", "b", "c"]), **{**OPTIONS, "similarity": threshold})


def test_similarity_without_texts_says_what_to_pass():
    with pytest.raises(AdvantageInputError, match="pass anchor_text"):
        compute_advantages("gigpo", rows(), **{**OPTIONS, "similarity": 0.9})


def test_unknown_estimator_lists_the_valid_ones():
    with pytest.raises(AdvantageInputError, match="unknown estimator 'gipgo'; valid: gigpo, graphgpo, grpo, hgpo, ppo, rloo"):
        compute_advantages("gipgo", rows(), **OPTIONS)


def test_bad_options_name_the_option():
    with pytest.raises(AdvantageInputError, match="norm='z' is unknown; use one of std, mean"):
        compute_advantages("gigpo", rows(), **{**OPTIONS, "norm": "z"})
    with pytest.raises(AdvantageInputError, match="episode_stats='traj' is unknown"):
        compute_advantages("gigpo", rows(), **{**OPTIONS, "episode_stats": "traj"})
    with pytest.raises(AdvantageInputError, match=r"gamma=1.5 must be in \[0, 1\]"):
        compute_advantages("gigpo", rows(), **{**OPTIONS, "gamma": 1.5})


def test_ppo_without_values_says_so():
    with pytest.raises(AdvantageInputError, match="'ppo' needs a value for every row"):
        compute_advantages("ppo", rows(), **OPTIONS)


def parse(text: str) -> StepRows:
    return parse_step_rows(io.StringIO(text), "steps.jsonl")


def test_jsonl_errors_name_the_line_and_field():
    ok = '{"group": 0, "traj": 0, "step": 0, "reward": 1, "anchor": "a"}\n'
    with pytest.raises(AdvantageInputError, match=r"steps.jsonl:2: missing field\(s\) reward, anchor"):
        parse(ok + '{"group": 0, "traj": 1, "step": 0}\n')
    with pytest.raises(AdvantageInputError, match="steps.jsonl:2: not valid JSON"):
        parse(ok + "{oops\n")
    with pytest.raises(AdvantageInputError, match="steps.jsonl:2: anchor is an integer key here but text on earlier lines"):
        parse(ok + '{"group": 0, "traj": 1, "step": 0, "reward": 1, "anchor": 7}\n')
    with pytest.raises(AdvantageInputError, match="'value' is given on some lines but missing on lines 1"):
        parse(ok + '{"group": 0, "traj": 1, "step": 0, "reward": 1, "anchor": "b", "value": 0.5}\n')
    with pytest.raises(AdvantageInputError, match=r"steps.jsonl:2: reward=nan must be a finite number"):
        parse(ok + '{"group": 0, "traj": 1, "step": 0, "reward": NaN, "anchor": "b"}\n')
    with pytest.raises(AdvantageInputError, match="steps.jsonl:2: value=inf must be a finite number"):
        parse(ok.replace("}", ', "value": 1}') + '{"group": 0, "traj": 1, "step": 0, "reward": 1, "anchor": "b", "value": Infinity}\n')
    with pytest.raises(AdvantageInputError, match="step=0.5 must be an integer"):
        parse('{"group": 0, "traj": 1, "step": 0.5, "reward": 1, "anchor": "b"}\n')
    with pytest.raises(AdvantageInputError, match=r"rows 0 and 1 are the same step \(group=0, traj=0, step=0\)"):
        parse(ok + ok)
