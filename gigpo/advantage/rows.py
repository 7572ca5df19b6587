"""The input of every estimator: one row per environment step, as flat typed arrays.

Rows may come in any order (the rollout appends them as environments finish). A trajectory is
identified by the pair (group, traj); inside it, `step` orders the rows. Validation happens once,
at construction, so estimators can trust their input and stay free of checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from gigpo.advantage.segments import TrajectoryLayout


class AdvantageInputError(ValueError):
    """Rows or options an estimator cannot use; the message names the offending rows or option."""


def _row_list(rows: np.ndarray, limit: int = 5) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return f"{shown}{more}"


def _as_int64(name: str, values: object) -> np.ndarray:
    if values is None:
        raise AdvantageInputError(f"step rows are missing the field {name!r}")
    array = np.asarray(values)
    if array.dtype == np.uint64:  # anchor keys hashed to unsigned 64 bits keep their bits
        return array.view(np.int64)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise AdvantageInputError(f"field {name!r} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def _as_float64(name: str, values: object) -> np.ndarray:
    if values is None:
        raise AdvantageInputError(f"step rows are missing the field {name!r}")
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AdvantageInputError(f"field {name!r} must hold numbers: {exc}") from None
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise AdvantageInputError(
            f"field {name!r} is NaN or infinite in rows {_row_list(bad)}; "
            "fix the reward/value before computing advantages"
        )
    return array


@dataclass(frozen=True, eq=False)  # arrays: compare fields with numpy, not ==
class StepRows:
    """One row per environment step; all arrays have shape (N,) and row i describes one step."""

    group: np.ndarray   # (N,) int64  task group: trajectories rolled out from the same initial state
    traj: np.ndarray    # (N,) int64  trajectory id; a trajectory is the pair (group, traj)
    step: np.ndarray    # (N,) int64  step index inside the trajectory (orders its rows)
    reward: np.ndarray  # (N,) float64  reward received after this step's action
    anchor: np.ndarray  # (N,) int64  hashed anchor state (see anchors.anchor_key)
    value: Optional[np.ndarray] = None          # (N,) float64  critic value V(s_t); PPO only
    anchor_text: Optional[Sequence[str]] = field(default=None, repr=False)
    """(N,) anchor texts; needed only for similarity grouping (hashes cannot be compared for similarity)."""
    _layout: TrajectoryLayout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the arrays once, here
        set_(self, "group", _as_int64("group", self.group))
        set_(self, "traj", _as_int64("traj", self.traj))
        set_(self, "step", _as_int64("step", self.step))
        set_(self, "anchor", _as_int64("anchor", self.anchor))
        set_(self, "reward", _as_float64("reward", self.reward))
        if self.value is not None:
            set_(self, "value", _as_float64("value", self.value))
        n = len(self.reward)
        for name in ("group", "traj", "step", "anchor", "reward", "value"):
            array = getattr(self, name)
            if array is not None and array.shape != (n,):
                raise AdvantageInputError(f"field {name!r} has shape {array.shape}, expected ({n},) like 'reward'")
        if self.anchor_text is not None:
            if len(self.anchor_text) != n:
                raise AdvantageInputError(f"anchor_text has {len(self.anchor_text)} entries, expected {n}")
            bad = [i for i, t in enumerate(self.anchor_text) if not isinstance(t, str)]
            if bad:
                raise AdvantageInputError(f"anchor_text must be strings; rows {_row_list(np.asarray(bad))} are not")
        layout = TrajectoryLayout.build(self.group, self.traj, self.step)
        if layout.first_duplicate is not None:
            a, b = layout.first_duplicate
            raise AdvantageInputError(
                f"rows {a} and {b} are the same step "
                f"(group={self.group[a]}, traj={self.traj[a]}, step={self.step[a]}); "
                "each (group, traj, step) must appear once (do not pad batches with duplicated rows)"
            )
        set_(self, "_layout", layout)

    @property
    def layout(self) -> TrajectoryLayout:
        """Rows sorted into trajectories (built once, at construction)."""
        return self._layout

    def __len__(self) -> int:
        return len(self.reward)

    def select(self, mask_or_index: np.ndarray) -> "StepRows":
        """The rows picked by a boolean mask or index array (e.g. the groups dynamic sampling keeps)."""
        idx = np.asarray(mask_or_index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        text = None if self.anchor_text is None else [self.anchor_text[i] for i in idx]
        return StepRows(
            group=self.group[idx], traj=self.traj[idx], step=self.step[idx], reward=self.reward[idx],
            anchor=self.anchor[idx], value=None if self.value is None else self.value[idx], anchor_text=text,
        )
