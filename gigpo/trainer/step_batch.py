"""One iteration's steps from rollout to update: one typed, columnar batch, validated once.

    batch = StepBatch.from_records(rollout.steps, where="iteration 3, phase rollout")
    batch, result = with_advantages(batch, config.algorithm)   # advantages and returns, one function
    samples = batch.train_samples(tokenizer)                    # what the engines take

Row i of every column is one environment step. The estimators read `batch.rows` (the advantage
module's own `StepRows`, plain arrays: gigpo.advantage knows nothing of this class); the engines
read `train_samples()`. The rollout's records ride along for the rollout viewer. A batch is frozen:
adding advantages, critic values or dropping groups gives a new one, checked again by the constructor.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field, replace
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from gigpo.advantage.anchors import anchor_keys
from gigpo.advantage.estimators import AdvantageResult, compute_advantages
from gigpo.advantage.rows import StepRows
from gigpo.infra.seeds import placebo_order
from gigpo.rollout.records import StepRecord
from gigpo.trainer.action_tokens import action_token_mask
from gigpo.trainer.batching import TrainSample
from gigpo.trainer.nonfinite import require_finite

if TYPE_CHECKING:
    from gigpo.config import AlgorithmConfig


def grouping_anchors(records: Sequence[StepRecord], mixed_versions: bool = False) -> list[str]:
    """The text GiGPO's anchor key hashes: the state, and the policy version that acted in it unless
    `rollout.group_versions=mixed`, so by default no step group holds two versions' actions (in sync mode
    a rollout is one version, so the key groups exactly as the state alone would)."""
    return [r.anchor if mixed_versions else f"{r.anchor}\x1fpolicy version {r.policy_version}" for r in records]


class StepBatchError(ValueError):
    """Columns that do not describe the same steps; the message names the column and the row."""


@dataclass(frozen=True, eq=False)  # arrays: compare columns with numpy, not ==
class StepBatch:
    """N environment steps as columns; every column has N entries, row i of each is step i."""

    records: tuple[StepRecord, ...] = field(repr=False)
    """What was played, texts included (the rollout viewer's input)."""
    group: np.ndarray          # (N,) int64  task group
    traj: np.ndarray           # (N,) int64  trajectory id
    step: np.ndarray           # (N,) int64  step index in the trajectory
    anchor: np.ndarray         # (N,) int64  hashed anchor state (GiGPO's step-group key)
    anchor_text: tuple[str, ...] = field(repr=False)
    reward: np.ndarray         # (N,) float64
    policy_version: np.ndarray  # (N,) int64  generator weight version that sampled the response
    prompt_ids: tuple[list[int], ...] = field(repr=False)
    response_ids: tuple[list[int], ...] = field(repr=False)
    behaviour_logprobs: tuple[list[float], ...] = field(repr=False)
    """Per response token, log-probs under the generator that sampled it."""
    token_values: Optional[tuple[Tensor, ...]] = field(default=None, repr=False)
    """PPO: the critic's (R,) values per response token, before the update."""
    advantage: Optional[np.ndarray] = None  # (N,) float64, added by with_advantages
    returns: Optional[np.ndarray] = None    # (N,) float64, added by with_advantages
    where: InitVar[str] = "step batch"
    """Names the iteration and phase in a NaN/inf error (not stored)."""
    _rows: StepRows = field(init=False, repr=False)

    def __post_init__(self, where: str) -> None:
        n = len(self.records)
        require_finite("rewards", self.reward, where)
        for name in ("group", "traj", "step", "anchor", "anchor_text", "reward", "policy_version", "prompt_ids",
                     "response_ids", "behaviour_logprobs", "token_values", "advantage", "returns"):
            column = getattr(self, name)
            if column is not None and len(column) != n:
                raise StepBatchError(f"column {name!r} has {len(column)} entries for {n} steps")
        for i, (prompt, response, logps) in enumerate(zip(self.prompt_ids, self.response_ids, self.behaviour_logprobs)):
            if not prompt or not response:
                raise StepBatchError(f"step {i} has an empty {'prompt' if not prompt else 'response'}; a trained "
                                     "step needs both")
            if len(logps) != len(response):
                raise StepBatchError(f"step {i} has {len(logps)} behaviour log-probs for {len(response)} response tokens")
            if self.token_values is not None and self.token_values[i].shape != (len(response),):
                raise StepBatchError(f"step {i}: token_values has shape {tuple(self.token_values[i].shape)}, expected "
                                     f"({len(response)},)")
        for name in ("advantage", "returns"):
            if getattr(self, name) is not None:
                require_finite(name, getattr(self, name), where)
        value = None if self.token_values is None else [float(v[0]) for v in self.token_values]  # V(s_t)
        rows = StepRows(group=self.group, traj=self.traj, step=self.step, reward=self.reward, anchor=self.anchor,
                        value=value, anchor_text=list(self.anchor_text))  # checks ids and duplicated steps
        set_ = object.__setattr__  # frozen: keep the normalised arrays
        for name in ("group", "traj", "step", "anchor", "reward"):
            set_(self, name, getattr(rows, name))
        set_(self, "policy_version", np.asarray(self.policy_version, dtype=np.int64))
        set_(self, "_rows", rows)

    @classmethod
    def from_records(cls, records: Sequence[StepRecord], where: str = "step batch",
                     mixed_versions: bool = False) -> "StepBatch":
        """The batch of a rollout's step records (anchors hashed once, here, with the policy version unless
        `mixed_versions`: see grouping_anchors)."""
        texts = tuple(r.anchor for r in records)
        return cls(records=tuple(records), group=np.array([r.group for r in records], dtype=np.int64),
                   traj=np.array([r.traj for r in records], dtype=np.int64),
                   step=np.array([r.step for r in records], dtype=np.int64),
                   anchor=anchor_keys(grouping_anchors(records, mixed_versions)),
                   anchor_text=texts, reward=np.array([r.reward for r in records], dtype=np.float64),
                   policy_version=np.array([r.policy_version for r in records], dtype=np.int64),
                   prompt_ids=tuple(r.prompt_ids for r in records), response_ids=tuple(r.response_ids for r in records),
                   behaviour_logprobs=tuple(r.response_logprobs for r in records), where=where)

    @classmethod
    def concat(cls, batches: Sequence["StepBatch"]) -> "StepBatch":
        """Rollouts of one iteration (dynamic sampling's draws) as one batch, before advantages."""
        return cls.from_records([r for b in batches for r in b.records])

    def __len__(self) -> int:
        return len(self.records)

    @property
    def rows(self) -> StepRows:
        """The estimators' input (with the critic's V(s_t) once token_values are set)."""
        return self._rows

    def select(self, index: np.ndarray) -> "StepBatch":
        """The steps at `index` (a boolean mask or positions), e.g. the groups dynamic sampling keeps."""
        idx = np.flatnonzero(index) if np.asarray(index).dtype == bool else np.asarray(index, dtype=np.int64)
        pick = lambda column: None if column is None else tuple(column[i] for i in idx)  # noqa: E731
        arrays = {name: getattr(self, name)[idx] for name in ("group", "traj", "step", "anchor", "reward", "policy_version")}
        return replace(self, records=pick(self.records), anchor_text=pick(self.anchor_text),
                       prompt_ids=pick(self.prompt_ids), response_ids=pick(self.response_ids),
                       behaviour_logprobs=pick(self.behaviour_logprobs), token_values=pick(self.token_values),
                       advantage=None if self.advantage is None else self.advantage[idx],
                       returns=None if self.returns is None else self.returns[idx], **arrays)

    def bare_samples(self) -> list[TrainSample]:
        """Prompt and response only: what the critic scores before advantages exist."""
        return [TrainSample(p, r) for p, r in zip(self.prompt_ids, self.response_ids)]

    def train_samples(self, tokenizer, behaviour_as_old: bool = False) -> list[TrainSample]:
        """The engines' samples: advantage, action-token mask, the critic's targets (PPO) and, with
        `behaviour_as_old`, the generator's log-probs as the PPO ratio's old ones."""
        if self.advantage is None:
            raise StepBatchError("train_samples() needs advantages: call with_advantages(batch, ...) first")
        samples = []
        for i, (prompt, response) in enumerate(zip(self.prompt_ids, self.response_ids)):
            sample = TrainSample(prompt, response, advantage=float(self.advantage[i]),
                                 action_mask=torch.tensor(action_token_mask(tokenizer, response)))
            if behaviour_as_old:
                sample.logp_old = torch.tensor(self.behaviour_logprobs[i], dtype=torch.float32)
            if self.token_values is not None:
                sample.values_old = self.token_values[i]
                sample.returns = torch.full_like(self.token_values[i], float(self.returns[i]))
            samples.append(sample)
        return samples


def with_advantages(batch: StepBatch, algorithm: "AlgorithmConfig", token_values: Optional[Sequence[Tensor]] = None,
                    placebo: Optional[tuple[int, int]] = None, where: str = "step batch"
                    ) -> tuple[StepBatch, AdvantageResult]:
    """`batch` with advantages and returns from `algorithm.estimator` (PPO: `token_values`, the critic's),
    and the estimator's full result (step groups, parts) for diagnostics.

    `placebo` = (seed, iteration) permutes the advantages (`algorithm.shuffle_advantages`). The result
    then carries the permuted advantages, with their episode and step parts moved alongside, so the logs
    and records show what each row was trained on, not the estimate it lost.
    """
    a = algorithm
    if token_values is not None:
        batch = replace(batch, token_values=tuple(token_values), where=where)
    result = compute_advantages(a.estimator, batch.rows, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight,
                                norm=a.norm, episode_stats=a.episode_stats, similarity=a.similarity,
                                step_min_spread=a.step_min_spread)
    require_finite("advantages", result.advantage, where)
    if placebo is not None:
        order = placebo_order(len(result.advantage), *placebo)
        result = replace(result, advantage=result.advantage[order], episode_advantage=result.episode_advantage[order],
                         step_advantage=result.step_advantage[order])
    return replace(batch, advantage=result.advantage, returns=result.returns, where=where), result
