"""Which held-out tasks two runs won at their final evaluation, paired task by task (every env: Sokoban rooms,
ALFWorld games, WebShop instructions ...; a task is its env seed).

Seed k of every algorithm in a comparison evaluates the same held-out tasks, so beside the success rates
the tasks themselves can be paired: both won, only one, neither. The tasks only one run won carry the
whole difference, and an exact McNemar test on them asks whether it is more than chance. Two runs can
tie on success while winning different tasks, or win exactly the same ones: a tie of the second kind
says the two policies ended in the same place, not only at the same rate.

A run's last evaluation against its own first tells learning from drift the same way: a policy that
learns keeps the tasks it started with and adds some; one that drifts wins some and loses as many.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gigpo.viewer.record_files import RECORDS_DIR, read_record


@dataclass(frozen=True)
class EvalTasks:
    iteration: int
    won: dict[int, bool]
    """Held-out task (its env seed) -> won. A record cut to its size limit (logging.rollouts_max_mb) holds
    fewer tasks than the evaluation played."""


@dataclass(frozen=True)
class TaskAgreement:
    tasks: int
    both: int
    only_a: int
    only_b: int
    neither: int
    p_mcnemar: float
    """Exact two-sided McNemar p-value: a binomial test of only_a against only_b (1.0 when both are 0)."""


def final_eval_tasks(run_dir: Path) -> Optional[EvalTasks]:
    """The tasks of the run's last evaluation record (None when the run kept no evaluation record)."""
    records = _eval_records(run_dir)
    return _tasks_of(records[-1]) if records else None


def first_eval_tasks(run_dir: Path) -> Optional[EvalTasks]:
    """The tasks of the run's first evaluation record: its start (iteration 0, after the warm-up)."""
    records = _eval_records(run_dir)
    return _tasks_of(records[0]) if records else None


def _eval_records(run_dir: Path) -> list[Path]:
    return sorted(Path(run_dir, RECORDS_DIR).glob("*-eval.jsonl.gz"))  # names start with the zero-padded iteration


def _tasks_of(record: Path) -> EvalTasks:
    header, trajs = read_record(record)
    won = {int(row["seed"]): bool(row["won"]) for row in trajs if row.get("kind") == "traj"}
    return EvalTasks(int(header["iteration"]), won)


def task_agreement(a: dict[int, bool], b: dict[int, bool]) -> TaskAgreement:
    """Pair the tasks both runs recorded (a missing task in either is left out)."""
    from scipy.stats import binomtest

    shared = sorted(set(a) & set(b))
    both = sum(a[r] and b[r] for r in shared)
    only_a = sum(a[r] and not b[r] for r in shared)
    only_b = sum(b[r] and not a[r] for r in shared)
    discordant = only_a + only_b
    p = binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    return TaskAgreement(len(shared), both, only_a, only_b, len(shared) - both - only_a - only_b, float(p))
