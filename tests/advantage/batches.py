"""Hypothesis strategies for random step-row batches shaped like agent rollouts (shared by the tests)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from hypothesis import strategies as st

from gigpo.advantage import StepRows

# Agent-like rewards: mostly 0, success bonuses, the -0.1 invalid-action penalty; many exact ties.
AGENT_REWARDS = st.sampled_from([0.0, 0.0, 0.0, 1.0, -0.25, 10.0, 0.5, -0.1])
ANY_REWARDS = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False)


@dataclass
class Batch:
    group: list
    traj: list
    step: list
    reward: list
    anchor: list          # int keys
    value: list
    text: list            # anchor texts (for similarity grouping)

    def rows(self, with_text: bool = False) -> StepRows:
        return StepRows(group=np.asarray(self.group), traj=np.asarray(self.traj), step=np.asarray(self.step),
                        reward=np.asarray(self.reward), anchor=np.asarray(self.anchor), value=np.asarray(self.value),
                        anchor_text=self.text if with_text else None)

    def permuted(self, perm: list[int]) -> "Batch":
        pick = lambda xs: [xs[i] for i in perm]  # noqa: E731
        return Batch(*(pick(getattr(self, f)) for f in ("group", "traj", "step", "reward", "anchor", "value", "text")))


BASE_TEXTS = ["you are in the kitchen", "you are in the kitchen.", "nothing happens", "a", "", "you see a fridge é"]


@st.composite
def texts(draw) -> str:
    """Short texts, often near-copies of each other, so similarity thresholds matter."""
    base = draw(st.sampled_from(BASE_TEXTS))
    edits = draw(st.integers(0, 3))
    chars = list(base)
    for _ in range(edits):
        pos = draw(st.integers(0, len(chars)))
        if chars and draw(st.booleans()):
            del chars[min(pos, len(chars) - 1)]
        else:
            chars.insert(pos, draw(st.sampled_from("aeiy é€")))
    return "".join(chars)


@st.composite
def batches(draw, rewards=AGENT_REWARDS, max_groups: int = 4, max_trajs: int = 4, max_len: int = 6,
            equal_lengths: bool = False, anchors: Optional[int] = 4) -> Batch:
    """Groups of trajectories with repeated anchors, gappy step indices, and rows in random order."""
    b = Batch([], [], [], [], [], [], [])
    n_groups = draw(st.integers(1, max_groups))
    common_len = draw(st.integers(1, max_len))
    for g in range(n_groups):
        group_label = draw(st.integers(-5, 100)) * 1000 + g   # arbitrary, distinct group ids
        for t in range(draw(st.integers(1, max_trajs))):
            length = common_len if equal_lengths else draw(st.integers(1, max_len))
            steps = sorted(draw(st.sets(st.integers(0, 3 * max_len), min_size=length, max_size=length)))
            for s in steps:
                b.group.append(group_label)
                b.traj.append(t)  # same traj ids in every group: a trajectory is (group, traj)
                b.step.append(s)
                b.reward.append(draw(rewards))
                b.anchor.append(draw(st.integers(0, anchors)) if anchors is not None else len(b.anchor))
                b.value.append(draw(st.floats(-2, 2, allow_nan=False)))
                b.text.append(draw(texts()))
    perm = draw(st.permutations(range(len(b.reward))))
    return b.permuted(list(perm))
