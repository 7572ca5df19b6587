"""Similarity = 2 * LCS / (len a + len b): rapidfuzz's ratio and ours equal a textbook LCS."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_advantage import lcs_length, lcs_similarity
from rapidfuzz import fuzz

from gigpo.advantage import text_similarity
from gigpo.advantage.similarity import similarity_step_groups

# Non-ASCII characters included: similarity counts characters, not UTF-8 bytes.
TEXT = st.text(alphabet="abi é€\n", max_size=40)


@settings(max_examples=300, deadline=None)
@given(a=TEXT, b=TEXT)
def test_rapidfuzz_ratio_is_the_lcs_similarity(a, b):
    exact = lcs_similarity(a, b)
    assert text_similarity(a, b) == exact
    assert abs(fuzz.ratio(a, b) / 100 - exact) < 1e-12


def test_lcs_reference_on_known_pairs():
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    assert lcs_similarity("kitten", "sitting") == 2 * 4 / 13
    assert text_similarity("", "") == 1.0 and text_similarity("a", "") == 0.0


def test_a_row_joins_the_first_created_group_whose_leader_is_similar_not_the_most_similar():
    # "abcd" leads group 0, "abxy" leads group 1 (similarity 0.5 < 0.6). "abxd" is 0.75-similar to
    # both leaders: it joins group 0, the first created. "abxy" again joins group 1 through its leader.
    texts = ["abcd", "abxy", "abxd", "abxy", "zzzz"]
    ids, n = similarity_step_groups(np.zeros(5, dtype=np.int64), texts, 0.6)
    assert ids.tolist() == [0, 1, 0, 1, 2] and n == 3


def test_groups_never_mix_and_threshold_one_means_identical():
    texts = ["same", "same", "same", "samf"]
    ids, n = similarity_step_groups(np.array([0, 1, 0, 0]), texts, 1.0)
    assert ids[0] == ids[2] and len({ids[0], ids[1], ids[3]}) == 3 and n == 3


def test_similarity_exactly_at_the_threshold_joins():
    # "abcd" vs "abce": LCS 3, similarity 6/8 = 0.75 exactly.
    group = np.zeros(2, dtype=np.int64)
    assert similarity_step_groups(group, ["abcd", "abce"], 0.75)[1] == 1
    assert similarity_step_groups(group, ["abcd", "abce"], 0.7500001)[1] == 2
