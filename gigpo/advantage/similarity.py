"""Step groups by text similarity, for states that rarely repeat exactly (e.g. search results).

The rule (exactly): inside a group, rows are taken in input order; a row joins the first step group,
in creation order, whose first member's text has similarity >= threshold with it, else it starts a
new step group. Similarity(a, b) = 2 * LCS(a, b) / (len(a) + len(b)) over characters (1 for two
empty texts), i.e. 1 - Indel distance / (len(a) + len(b)), which rapidfuzz computes bit-parallel.

Speed without changing the result: identical texts reuse the earlier decision, and each LCS stops
as soon as the distance exceeds what the threshold allows. The sequential rule is a Python loop over
rows and leaders (it is order-dependent by definition); the LCS itself runs in rapidfuzz's C++.
Cheap lower bounds on the distance (character or bigram histograms) were tried and rejected: on
300-word texts they pruned under 1% of pairs at threshold 0.9, because unrelated texts of one
language share most of their characters and bigrams.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from rapidfuzz.distance import Indel

from gigpo.advantage.rows import AdvantageInputError


def check_threshold(threshold: float) -> float:
    """The threshold as a float, or an error naming the option when it is outside (0, 1]."""
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise AdvantageInputError(f"similarity={threshold!r} must be a number in (0, 1]") from None
    if not 0.0 < value <= 1.0:
        raise AdvantageInputError(
            f"similarity={threshold!r} is outside (0, 1]; use e.g. 0.9-0.95, or no similarity for exact anchors"
        )
    return value


def text_similarity(a: str, b: str) -> float:
    """2 * LCS(a, b) / (len(a) + len(b)) over characters; 1.0 for two empty texts."""
    total = len(a) + len(b)
    return 1.0 if total == 0 else (total - Indel.distance(a, b)) / total


def _group_members(texts: Sequence[str], threshold: float) -> np.ndarray:
    """Local step-group index of each text of one group (texts in input order)."""
    member = np.empty(len(texts), dtype=np.int64)
    leaders: list[str] = []                        # each step group's first member, in creation order
    seen: dict[str, int] = {}                      # identical text -> its step group
    for i, text in enumerate(texts):
        found = seen.get(text, -1)
        if found < 0:
            for k, other in enumerate(leaders):
                total = len(text) + len(other)
                if total == 0:
                    found = k
                    break
                # Stop the LCS early once the distance exceeds what the threshold allows (+1 for rounding).
                cutoff = int((1.0 - threshold) * total) + 1
                dist = Indel.distance(text, other, score_cutoff=cutoff)
                if dist <= cutoff and (total - dist) / total >= threshold:
                    found = k
                    break
            else:
                found = len(leaders)
                leaders.append(text)
            seen[text] = found
        member[i] = found
    return member


def similarity_step_groups(group_id: np.ndarray, texts: Sequence[str], threshold: float) -> tuple[np.ndarray, int]:
    """(N,) dense step-group ids by text similarity within each group (see module doc), and their count."""
    threshold = check_threshold(threshold)
    if len(texts) != len(group_id):
        raise AdvantageInputError(f"similarity grouping got {len(texts)} texts for {len(group_id)} rows")
    order = np.argsort(group_id, kind="stable")    # groups together, input order inside each
    starts = np.flatnonzero(np.r_[True, group_id[order][1:] != group_id[order][:-1]]) if len(order) else order
    ids = np.empty(len(group_id), dtype=np.int64)
    offset = 0
    for start, stop in zip(starts, np.append(starts[1:], len(order))):
        rows = order[start:stop]
        local = _group_members([texts[r] for r in rows], threshold)
        ids[rows] = local + offset
        offset += int(local.max()) + 1
    return ids, offset
