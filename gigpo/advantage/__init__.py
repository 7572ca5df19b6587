"""Advantage estimators: pure functions over flat per-step rows (GiGPO, GRPO, RLOO, PPO-GAE, HGPO, GraphGPO).

The trainer's calls:
    rows = StepRows(group=..., traj=..., step=..., reward=..., anchor=anchor_keys(texts))
    result = compute_advantages(cfg.estimator, rows, gamma=..., lam=..., step_weight=..., norm=...,
                                episode_stats=..., similarity=...)   # the rows, advantages set
    metrics.update(step_group_diagnostics(result))
    metrics.update(revisit_diagnostics(rows))      # state recurrence, whatever the estimator
Definitions are in estimators.py; the JSONL row format in jsonl.py.
"""
from gigpo.advantage.anchors import anchor_key, anchor_keys
from gigpo.advantage.diagnostics import revisit_diagnostics, step_group_diagnostics
from gigpo.advantage.estimators import (
    ESTIMATORS,
    AdvantageOptions,
    compute_advantages,
    get_estimator,
    register_estimator,
    scored,
)
from gigpo.advantage import graphgpo as _graphgpo, hgpo as _hgpo  # noqa: F401  (registers both estimators)
from gigpo.advantage.jsonl import parse_step_rows, read_advantages, read_step_rows, write_advantages, write_step_rows
from gigpo.advantage.rows import AdvantageInputError, StepRows
from gigpo.advantage.sampling import informative_groups
from gigpo.advantage.similarity import text_similarity

__all__ = [
    "ESTIMATORS", "AdvantageInputError", "AdvantageOptions", "StepRows", "anchor_key",
    "anchor_keys", "compute_advantages", "get_estimator", "informative_groups", "parse_step_rows",
    "read_advantages", "read_step_rows", "register_estimator", "revisit_diagnostics", "scored", "step_group_diagnostics", "text_similarity",
    "write_advantages", "write_step_rows",
]
