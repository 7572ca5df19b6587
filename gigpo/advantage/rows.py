"""The one record of a batch of environment steps: `StepRows`, one row per step, every field a column.

A step's data lives here from the moment the env returns it to the loss:

    rollout (records.RolloutTally)  fills ids, tokens, behaviour log-probs, reward, anchor key, version, texts
    estimators (estimators.py)      read ids, rewards, anchors; return the rows with advantages and returns
    trainer (trainer/samples.py)    cuts the rows into the engines' samples (the one conversion left)
    viewer (viewer/record_files.py) writes its records from the rows the estimator returned

It lives in gigpo.advantage because that package is pure numpy and imports no other gigpo package:
the rollout, the trainer and the viewer can all import it without an import cycle, and the estimators
stay pure functions over its arrays. Every column but the five ids-and-reward ones is optional: rows read
from a JSONL dump (`gigpo advantage`) carry no tokens, and a rollout's rows carry no advantages yet.

Rows may come in any order (the rollout appends them as environments finish). A trajectory is
identified by the pair (group, traj); inside it, `step` orders the rows. Validation happens once, at
construction (`with_columns` checks only the columns it sets), so the estimators, the trainer and the
viewer can trust the columns and stay free of checks.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Sequence

import numpy as np

from gigpo.advantage.segments import TrajectoryLayout


class AdvantageInputError(ValueError):
    """Rows or options that cannot be used; the message names the offending rows, column or option."""


class NonFiniteRows(AdvantageInputError):
    """A reward or value is NaN or infinite. The trainer stops on it as on any NaN (trainer/nonfinite.py)."""


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


def _as_float64(name: str, values: object, finite: bool = True) -> np.ndarray:
    if values is None:
        raise AdvantageInputError(f"step rows are missing the field {name!r}")
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AdvantageInputError(f"field {name!r} must hold numbers: {exc}") from None
    bad = np.flatnonzero(~np.isfinite(array)) if finite else ()
    if len(bad):
        raise NonFiniteRows(
            f"field {name!r} is NaN or infinite in rows {_row_list(bad)}; "
            "fix the reward/value before computing advantages"
        )
    return array


REQUIRED = ("group", "traj", "step", "reward", "anchor")
INT_COLUMNS = ("group", "traj", "step", "anchor", "policy_version", "step_group_size")
FINITE_COLUMNS = ("reward", "value")
"""Checked finite here: what the estimators read."""
ESTIMATE_COLUMNS = ("advantage", "episode_advantage", "step_advantage", "returns")
"""The estimator's float outputs; the trainer checks them finite with the iteration named (nonfinite.py)."""
BOOL_COLUMNS = ("action_valid", "truncated_response")
TOKEN_COLUMNS = ("prompt_ids", "response_ids", "behaviour_logprobs", "token_values")


def _column(name: str, values: Any, n: int) -> Any:
    """Column `name` of n rows, normalised (int64, float64 or bool arrays; tuples for per-row objects), or
    None where an optional column is absent; an error names the column."""
    if values is None:
        if name in REQUIRED:
            raise AdvantageInputError(f"step rows are missing the field {name!r}")
        return None
    if name in INT_COLUMNS:
        column = _as_int64(name, values)
    elif name in FINITE_COLUMNS or name in ESTIMATE_COLUMNS:
        column = _as_float64(name, values, finite=name in FINITE_COLUMNS)
    elif name in BOOL_COLUMNS:
        column = np.asarray(values, dtype=bool)
    else:  # one Python object per row: token lists, texts, tensors
        column = values if isinstance(values, tuple) else tuple(values)
        if len(column) != n:
            raise AdvantageInputError(f"{name} has {len(column)} entries, expected {n}")
        if name == "anchor_text":
            bad = [i for i, t in enumerate(column) if not isinstance(t, str)]
            if bad:
                raise AdvantageInputError(f"anchor_text must be strings; rows {_row_list(np.asarray(bad))} are not")
        return column
    if column.shape != (n,):
        raise AdvantageInputError(f"field {name!r} has shape {column.shape}, expected ({n},) like 'reward'")
    return column


@dataclass(frozen=True, eq=False)  # arrays: compare fields with numpy, not ==
class StepRows:
    """N environment steps as columns; every column has N entries, row i of each is step i."""

    # ---- what every estimator reads
    group: np.ndarray   # (N,) int64  task group: trajectories rolled out from the same initial state
    traj: np.ndarray    # (N,) int64  trajectory id; a trajectory is the pair (group, traj)
    step: np.ndarray    # (N,) int64  step index inside the trajectory (orders its rows)
    reward: np.ndarray  # (N,) float64  reward received after this step's action
    anchor: np.ndarray  # (N,) int64  the state's key (anchors.anchor_key of its text): GiGPO's step groups,
    #                                 the revisit diagnostics and the viewer's records all use this one key
    value: Optional[np.ndarray] = None          # (N,) float64  critic value V(s_t); PPO only
    anchor_text: Optional[Sequence[str]] = field(default=None, repr=False)
    """(N,) anchor texts; needed only for similarity grouping (hashes cannot be compared for similarity)."""
    policy_version: Optional[np.ndarray] = None  # (N,) int64  weight version of the generator that acted

    # ---- what was played (the rollout fills these)
    prompt_ids: Optional[tuple[list[int], ...]] = field(default=None, repr=False)
    response_ids: Optional[tuple[list[int], ...]] = field(default=None, repr=False)
    behaviour_logprobs: Optional[tuple[list[float], ...]] = field(default=None, repr=False)
    """Per response token, log-probs under the generator that sampled it (the behaviour policy)."""
    observation: Optional[tuple[str, ...]] = field(default=None, repr=False)
    """What the model saw at this step (the env's observation text; the prompt adds task and history)."""
    response: Optional[tuple[str, ...]] = field(default=None, repr=False)
    action: Optional[tuple[Optional[str], ...]] = field(default=None, repr=False)
    """The action the env parsed from the response (None when it could not parse one)."""
    action_valid: Optional[np.ndarray] = field(default=None, repr=False)   # (N,) bool
    invalid_reason: Optional[tuple[str, ...]] = field(default=None, repr=False)
    truncated_response: Optional[np.ndarray] = field(default=None, repr=False)  # (N,) bool: hit max_new_tokens

    # ---- the critic's and the estimator's (trainer/samples.py, estimators.py)
    token_values: Optional[tuple[Any, ...]] = field(default=None, repr=False)
    """PPO: the critic's (R,) values per response token, before the update (value = their first)."""
    advantage: Optional[np.ndarray] = None          # (N,) float64  what the policy loss uses
    episode_advantage: Optional[np.ndarray] = None  # (N,) float64  GiGPO/GRPO/RLOO episode part; 0 for PPO
    step_advantage: Optional[np.ndarray] = None     # (N,) float64  GiGPO step part (before step_weight); 0 elsewhere
    step_group_size: Optional[np.ndarray] = None    # (N,) int64    rows in this row's step group; 1 where none
    returns: Optional[np.ndarray] = None            # (N,) float64  R_t; PPO: A + V, the critic's target
    _layout: TrajectoryLayout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.reward) if self.reward is not None else 0
        for name in self.columns():
            object.__setattr__(self, name, _column(name, getattr(self, name), n))  # frozen: normalised once, here
        self._check_tokens()
        layout = TrajectoryLayout.build(self.group, self.traj, self.step)
        if layout.first_duplicate is not None:
            a, b = layout.first_duplicate
            raise AdvantageInputError(
                f"rows {a} and {b} are the same step "
                f"(group={self.group[a]}, traj={self.traj[a]}, step={self.step[a]}); "
                "each (group, traj, step) must appear once (do not pad batches with duplicated rows)"
            )
        object.__setattr__(self, "_layout", layout)

    def _check_tokens(self) -> None:
        """A trained step needs a prompt, a response, and one behaviour log-prob (and critic value) per token."""
        if self.response_ids is None:
            return
        prompts = self.prompt_ids if self.prompt_ids is not None else [None] * len(self)
        for i, (prompt, response) in enumerate(zip(prompts, self.response_ids)):
            if prompt is not None and not prompt or not response:
                raise AdvantageInputError(f"step {i} has an empty {'response' if not response else 'prompt'}; "
                                          "a trained step needs both")
            if self.behaviour_logprobs is not None and len(self.behaviour_logprobs[i]) != len(response):
                raise AdvantageInputError(f"step {i} has {len(self.behaviour_logprobs[i])} behaviour log-probs for "
                                          f"{len(response)} response tokens")
            if self.token_values is not None and tuple(self.token_values[i].shape) != (len(response),):
                raise AdvantageInputError(f"step {i}: token_values has shape {tuple(self.token_values[i].shape)}, "
                                          f"expected ({len(response)},)")

    @classmethod
    def empty(cls) -> "StepRows":
        """No rows (a rank or a rollout that played nothing)."""
        none = np.zeros(0, dtype=np.int64)
        return cls(group=none, traj=none, step=none, reward=np.zeros(0), anchor=none)

    @property
    def layout(self) -> TrajectoryLayout:
        """Rows sorted into trajectories (built once, at construction)."""
        return self._layout

    def __len__(self) -> int:
        return len(self.reward)

    def columns(self) -> dict[str, Any]:
        """Every column by name (None where absent): what `replace` and `concat` rebuild rows from."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def select(self, mask_or_index: np.ndarray) -> "StepRows":
        """The rows picked by a boolean mask or index array (e.g. the groups dynamic sampling keeps), in that order."""
        idx = np.asarray(mask_or_index)
        idx = np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64, copy=False)
        picked = {}
        for name, column in self.columns().items():
            if column is None:
                picked[name] = None
            elif isinstance(column, np.ndarray):
                picked[name] = column[idx]
            else:
                picked[name] = tuple(column[i] for i in idx)
        return StepRows(**picked)

    @classmethod
    def concat(cls, parts: Sequence["StepRows"]) -> "StepRows":
        """Several sets of rows as one, in order (dynamic sampling's draws, the ranks' shares). Parts
        without rows are skipped; the others must carry the same columns."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        present = [name for name, column in parts[0].columns().items() if column is not None]
        for p in parts[1:]:
            mine = [name for name, column in p.columns().items() if column is not None]
            if mine != present:
                raise AdvantageInputError(f"cannot concatenate rows with columns {present} and {mine}")
        joined: dict[str, Any] = {}
        for name in present:
            first = getattr(parts[0], name)
            if isinstance(first, np.ndarray):
                joined[name] = np.concatenate([getattr(p, name) for p in parts])
            else:
                joined[name] = tuple(x for p in parts for x in getattr(p, name))
        return cls(**joined)

    def as_dicts(self) -> list[dict[str, Any]]:
        """One plain dict per row, of the columns present (Python values): for reading single steps in tests,
        benchmarks and debugging. The columns stay the record; nothing is built back from these."""
        present = {name: (column.tolist() if isinstance(column, np.ndarray) else column)
                   for name, column in self.columns().items() if column is not None}
        return [{name: column[i] for name, column in present.items()} for i in range(len(self))]

    def with_columns(self, **changes: Any) -> "StepRows":
        """These rows with columns set, replaced or (None) dropped: e.g. an estimator's outputs. The ids stay
        (`select` or a new StepRows changes those), so only the changed columns are checked and the
        trajectory layout is kept."""
        if {"group", "traj", "step"} & set(changes):
            raise AdvantageInputError("with_columns() keeps the ids; build new StepRows to change group, traj or step")
        out = copy.copy(self)
        for name, values in changes.items():
            object.__setattr__(out, name, _column(name, values, len(self)))
        if set(changes) & set(TOKEN_COLUMNS):
            out._check_tokens()
        return out

    def without(self, *names: str) -> "StepRows":
        """These rows without the named optional columns (e.g. what need not cross processes)."""
        return self.with_columns(**{name: None for name in names})

    def in_step_order(self) -> "StepRows":
        """The rows sorted by (step, traj): the order a batched rollout produces them in."""
        return self.select(np.lexsort((self.traj, self.step)))
