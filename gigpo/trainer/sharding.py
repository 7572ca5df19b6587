"""The rollout split over ranks: each rank plays a contiguous share of an iteration's task groups (and
of the evaluation tasks) with its own generator and env pool, computes its groups' advantages and trains
on its own steps. What rank 0 logs is put back together from the ranks' parts: metrics and episode
summaries always, the advantages' numbers for the diagnostics, the steps' texts only for a record that is due.

Group and trajectory ids are global (`rollout(group_offset=share.start)`), so a share's rows carry the
ids they would have in the whole batch, and the advantage, which is group-local for every estimator
(GiGPO, GRPO, RLOO; PPO's is per trajectory), does not depend on how the groups were split.
Where ranks cannot each hold a generator (a remote server) rank 0 plays every group, as before
(`playing_ranks`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from gigpo.advantage.rows import StepRows
from gigpo.config import RolloutConfig
from gigpo.rollout.records import Rollout

RATE_KEYS = ("success", "return", "episode_length", "invalid_action_rate", "episodes", "errors")
"""Rollout.metrics() keys that are functions of the episodes alone: recomputed from the merged episodes."""
MAX_KEYS = ("rollout/draws",)
"""Metrics of a share that the whole rollout takes the largest of (with every `time/` key: ranks run in parallel)."""


@dataclass(frozen=True)
class Share:
    """Which rank of how many playing ranks this process is (0 of 1: it plays everything).

    With engines spanning several ranks (`rollout.tensor_parallel_size`), `rank` and `ranks` count engines,
    and `replica` says which of the engine's `replicas` ranks this is: they all play the same groups with the
    same seeds, as the engine needs, then each trains on every `replicas`-th row (`own_rows`), and only
    replica 0's episodes, metrics and records are merged."""

    rank: int = 0
    ranks: int = 1
    replica: int = 0
    replicas: int = 1

    @property
    def reports(self) -> bool:
        """This rank's episodes and metrics count (a replica's repeat replica 0's)."""
        return self.replica == 0

    def own_rows(self, count: int) -> "np.ndarray":
        """Which of its engine's `count` rows this rank trains on: all of them, or every `replicas`-th."""
        return np.arange(count) % self.replicas == self.replica

    def of(self, count: int) -> range:
        """This rank's contiguous share of `count` items; shares differ by at most one, the first ranks
        take the extra ones."""
        if self.ranks < 1 or not 0 <= self.rank < self.ranks:
            raise ValueError(f"rank {self.rank} of {self.ranks} playing ranks: need 0 <= rank < ranks")
        base, extra = divmod(count, self.ranks)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))


_ROLLOUT = RolloutConfig()


def playing_ranks(backend: str, rank: int, world_size: int,
                  tensor_parallel_size: int = _ROLLOUT.tensor_parallel_size) -> Optional[Share]:
    """This rank's place among the ranks that play, or None if it plays nothing. The hf backend plays on
    every rank, each on its own device (cuda:LOCAL_RANK), and so does in-process vLLM: on several ranks each
    builds its engine through vLLM's external launcher, which puts it on the rank's own device
    (`vllm_backend.parallel_kwargs`). An engine spanning `tensor_parallel_size` consecutive ranks is one
    player: its ranks play the same share in step (replicas). A remote server (vllm-server) is fed by rank 0
    alone, which pushes its weights."""
    if backend == "vllm":
        return Share(rank // tensor_parallel_size, world_size // tensor_parallel_size,
                     rank % tensor_parallel_size, tensor_parallel_size)
    if backend == "hf":
        return Share(rank, world_size)
    return Share(0, 1) if rank == 0 else None


def merge_rollouts(parts: Sequence[Optional[Rollout]]) -> Rollout:
    """Shares of one rollout as the rollout one rank would have played: rows in (step, traj) order,
    episodes in traj order, token counts and faults summed, phase times the longest share's."""
    played = [p for p in parts if p is not None]
    faults: dict[str, float] = {}
    for p in played:
        for key, value in p.env_faults.items():
            faults[key] = faults.get(key, 0.0) + value
    return Rollout(steps=StepRows.concat([p.steps for p in played]).in_step_order(),
                   episodes=sorted((e for p in played for e in p.episodes), key=lambda e: e.traj),
                   tokens_generated=sum(p.tokens_generated for p in played),
                   seconds_generate=max((p.seconds_generate for p in played), default=0.0),
                   seconds_env=max((p.seconds_env for p in played), default=0.0),
                   seconds_prompt=max((p.seconds_prompt for p in played), default=0.0), env_faults=faults)


def merge_metrics(parts: Sequence[dict[str, float]], first_draw: Rollout) -> dict[str, float]:
    """The iteration's rollout metrics from each share's: sums of counts, the largest of times and draws,
    and the episode rates (success, return, ...) recomputed from `first_draw`, every share's first-draw
    episodes merged (each share computed its own on those)."""
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            if key.startswith("time/") or key in MAX_KEYS:
                out[key] = max(out.get(key, value), value)
            else:
                out[key] = out.get(key, 0.0) + value
    rates = first_draw.metrics()
    out = {k: v for k, v in out.items() if not k.startswith("rollout/success/")}  # per task type: recomputed
    out.update({k: v for k, v in rates.items()
                if k.startswith("rollout/success/") or k[len("rollout/"):] in RATE_KEYS})
    return out


def gather_share(played: Optional[tuple], share: Optional[Share], world_size: int,
                 main: bool) -> tuple[StepRows, list, dict[str, float], int]:
    """Every rank's view of the iteration's rollout (a collective): its own steps, which stay where they were
    played, every rank's episode summaries and merged metrics, and the step count of all ranks together.
    Where rank 0 alone plays (a remote server), it scatters its groups instead, a share to each rank, so that
    the update stays spread over the ranks."""
    from gigpo.trainer.distributed import all_gather_objects, all_reduce_floats, scatter_objects

    rows = played[0] if played is not None else StepRows.empty()
    mine = None if played is None or not share.reports else played[1:]  # a replica's repeat its engine's first
    parts = [p for p in all_gather_objects(mine) if p is not None]
    episodes = sorted((e for p in parts for e in p[0]), key=lambda e: e.traj)
    metrics = merge_metrics([p[1] for p in parts], merge_rollouts([p[2] for p in parts]))
    rows_total = int(all_reduce_floats([len(rows)])[0])
    if share is None or share.ranks * share.replicas < world_size:  # rank 0 played every group
        rows = scatter_objects(split_groups(rows, world_size) if main else None)
    return rows, episodes, metrics, rows_total


def gather_evaluation(local: Optional[Rollout], share: Optional[Share], keep_steps: bool) -> Rollout:
    """The ranks' evaluation shares merged on every rank (a collective); steps travel only when a record
    needs them (`keep_steps`), and an engine's replica ranks send nothing (their episodes repeat its first's)."""
    from gigpo.trainer.distributed import all_gather_objects

    if local is not None and not keep_steps:
        local = replace(local, steps=StepRows.empty())
    if local is not None and not share.reports:
        local = None
    return merge_rollouts(all_gather_objects(local))


def gather_advantage_rows(rows: StepRows, share: Optional[Share], with_texts: bool,
                          num_groups: int) -> Optional[StepRows]:
    """Every rank's scored rows, as rank 0 needs them for the diagnostics and records (a collective; see
    advantage_part); None if no rank trained a step."""
    from gigpo.trainer.distributed import all_gather_objects

    reports = share is None or share.reports  # a replica's rows repeat its engine's first rank's
    part = advantage_part(rows, with_texts=with_texts) if len(rows) and reports else None
    return merge_advantage_parts(all_gather_objects(part), num_groups)


def split_groups(rows: StepRows, ranks: int) -> list[StepRows]:
    """Steps played by one rank as `ranks` contiguous shares of their task groups (each in the rows' order),
    for the layouts where rank 0 alone plays."""
    groups = np.unique(rows.group)
    shares = [Share(r, ranks).of(len(groups)) for r in range(ranks)]
    return [rows.select(np.isin(rows.group, groups[s.start:s.stop])) for s in shares]


HEAVY_COLUMNS = ("prompt_ids", "response_ids", "behaviour_logprobs", "token_values")
"""Per-token columns: rank 0's diagnostics and records never need them."""
TEXT_COLUMNS = ("anchor_text", "observation", "response", "action", "invalid_reason")
"""What a rank sends rank 0 only when a record or rows file is due."""


def advantage_part(rows: StepRows, with_texts: bool) -> StepRows:
    """One rank's scored rows as numbers (ids, rewards, anchor keys, the estimator's columns), with the
    steps' texts only `with_texts` (a record or rows file is due)."""
    return rows.without(*HEAVY_COLUMNS, *(() if with_texts else TEXT_COLUMNS))


def merge_advantage_parts(parts: Sequence[Optional[StepRows]], num_groups: int) -> Optional[StepRows]:
    """The ranks' parts as the scored rows of one rank holding every group, in its order (draw by draw, each
    in (step, traj) order); None if no rank sent a part."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    rows = StepRows.concat(parts)
    return rows.select(np.lexsort((rows.traj, rows.step, rows.group // num_groups)))


def merge_gaps(parts: Sequence[tuple[float, int, float]]) -> tuple[float, int, float]:
    """The ranks' log-prob gaps (sum, count, max of |diff|) as one rank's."""
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), max(p[2] for p in parts))


def merge_staleness(parts: Sequence[tuple[dict[str, float], int]]) -> dict[str, float]:
    """The ranks' async staleness metrics (each with its sample count): the largest max, the sample-weighted mean."""
    parts = [(m, n) for m, n in parts if m]
    if not parts:
        return {}
    total = sum(n for _, n in parts)
    return {"async/staleness_max": max(m["async/staleness_max"] for m, _ in parts),
            "async/staleness_mean": sum(m["async/staleness_mean"] * n for m, n in parts) / total if total else 0.0}
