"""An iteration's StepRows scored by the estimator, and cut into the engines' samples.

    rows = with_advantages(rollout.steps, config.algorithm, split_versions=True)  # advantages and returns set
    samples = train_samples(rows, tokenizer)                                       # what the engines take

The rows (gigpo.advantage.rows.StepRows) carry a step from the env to here. `train_samples` is the one
conversion left on the way to the loss. It stays because the engines (engines.py) take a list of
samples: the loop attaches per-token tensors to each sample after it is built (the actor's old
log-probs, the reference's, the generator's for the rollout correction), and the engine tests and
benchmarks drive the engines with samples that never were rows. The batcher then packs samples into
micro-batches (batching.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch
from torch import Tensor

from gigpo.advantage.estimators import advantage_options, compute_advantages
from gigpo.advantage.rows import StepRows
from gigpo.infra.seeds import placebo_order
from gigpo.trainer.action_tokens import action_token_mask
from gigpo.trainer.batching import TrainSample
from gigpo.trainer.nonfinite import require_finite

if TYPE_CHECKING:
    from gigpo.config import AlgorithmConfig


def with_advantages(rows: StepRows, algorithm: "AlgorithmConfig", split_versions: bool,
                    token_values: Optional[Sequence[Tensor]] = None, placebo: Optional[tuple[int, int]] = None,
                    where: str = "step rows") -> StepRows:
    """`rows` with advantages, their parts and returns from `algorithm.estimator` (PPO: `token_values`, the
    critic's, become the rows' token_values and value V(s_t)). `split_versions`: rows of two policy versions
    never share a step group (rollout.group_versions=separate).

    `placebo` = (seed, iteration) permutes the advantages (`algorithm.shuffle_advantages`), their episode
    and step parts moved alongside, so the logs and records show what each row was trained on, not the
    estimate it lost.
    """
    a = algorithm
    if token_values is not None:
        rows = rows.with_columns(token_values=tuple(token_values), value=[float(v[0]) for v in token_values])
    scored = compute_advantages(a.estimator, rows, **advantage_options(a, split_versions))
    require_finite("advantages", scored.advantage, where)
    if placebo is not None:
        order = placebo_order(len(scored), *placebo)
        scored = scored.with_columns(advantage=scored.advantage[order],
                                     episode_advantage=scored.episode_advantage[order],
                                     step_advantage=scored.step_advantage[order])
    return scored


def bare_samples(rows: StepRows) -> list[TrainSample]:
    """Prompt and response only: what the critic scores before advantages exist (none for no rows)."""
    if not len(rows):
        return []
    return [TrainSample(p, r) for p, r in zip(rows.prompt_ids, rows.response_ids)]


def train_samples(rows: StepRows, tokenizer, behaviour_as_old: bool = False) -> list[TrainSample]:
    """The engines' samples: advantage, action-token mask, the critic's targets (PPO) and, with
    `behaviour_as_old`, the generator's log-probs as the PPO ratio's old ones."""
    if rows.advantage is None:
        raise ValueError("train_samples() needs scored rows: call with_advantages(rows, ...) first")
    if behaviour_as_old and rows.behaviour_logprobs is None:
        raise ValueError("trainer.old_logprobs=generator takes the generator's log-probs as the old ones, but these "
                         "rows have none: the rollout sampled with SamplingSettings(logprobs=False)")
    samples = []
    for i, (prompt, response) in enumerate(zip(rows.prompt_ids, rows.response_ids)):
        sample = TrainSample(prompt, response, advantage=float(rows.advantage[i]),
                             action_mask=torch.tensor(action_token_mask(tokenizer, response)))
        if behaviour_as_old:
            sample.logp_old = torch.tensor(rows.behaviour_logprobs[i], dtype=torch.float32)
        if rows.token_values is not None:
            sample.values_old = rows.token_values[i]
            sample.returns = torch.full_like(rows.token_values[i], float(rows.returns[i]))
        samples.append(sample)
    return samples
