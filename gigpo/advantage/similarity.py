"""Step groups by text similarity, for states that rarely repeat exactly (e.g. search results).

The rule (exactly): inside a group, rows are taken in input order; a row joins the first step group,
in creation order, whose first member's text has similarity >= threshold with it, else it starts a
new step group. Similarity(a, b) = 2 * LCS(a, b) / (len(a) + len(b)) over characters (1 for two
empty texts), i.e. 1 - Indel distance / (len(a) + len(b)), which rapidfuzz computes bit-parallel.

Speed without changing the result: identical texts reuse the earlier decision, and a leader is
only compared exactly when a cheap lower bound on the Indel distance still allows a match. The
bound is the L1 distance between character histograms (each insertion or deletion changes it by
exactly one; hashing characters into buckets can only lower it, so the bound stays valid).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from rapidfuzz.distance import Indel

from gigpo.advantage.rows import AdvantageInputError

_BUCKETS = 128  # character histogram width; code points are folded modulo this


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


def _char_histograms(texts: Sequence[str]) -> np.ndarray:
    """(n, _BUCKETS) int64 counts of each text's code points modulo _BUCKETS."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32) % _BUCKETS
    rows = np.repeat(np.arange(len(texts)), lengths)
    flat = np.bincount(rows * _BUCKETS + codes.astype(np.int64), minlength=len(texts) * _BUCKETS)
    return flat.reshape(len(texts), _BUCKETS)


def _group_members(texts: Sequence[str], threshold: float) -> np.ndarray:
    """Local step-group index of each text of one group (texts in input order)."""
    n = len(texts)
    hist = _char_histograms(texts)                 # (n, B)
    lengths = hist.sum(axis=1)                     # (n,)
    member = np.empty(n, dtype=np.int64)
    leaders: list[int] = []                        # row of each step group's first member
    seen: dict[str, int] = {}                      # identical text -> its step group
    for i, text in enumerate(texts):
        known = seen.get(text)
        if known is not None:
            member[i] = known
            continue
        found = -1
        if leaders:
            lead = np.asarray(leaders)
            total = lengths[lead] + lengths[i]                                  # (L,)
            lower = np.abs(hist[lead] - hist[i]).sum(axis=1)                    # (L,) <= Indel distance
            possible = (total == 0) | ((total - lower) / np.maximum(total, 1) >= threshold)
            for k in np.flatnonzero(possible):     # creation order
                other = texts[lead[k]]
                cutoff = int((1.0 - threshold) * total[k]) + 1
                dist = Indel.distance(text, other, score_cutoff=cutoff)
                if total[k] == 0 or (dist <= cutoff and (total[k] - dist) / total[k] >= threshold):
                    found = int(k)
                    break
        if found < 0:
            found = len(leaders)
            leaders.append(i)
        member[i] = found
        seen[text] = found
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
