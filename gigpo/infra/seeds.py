"""Every seed a run derives from `trainer.seed`, in one place.

Two kinds, kept apart so that one never repeats the other:
- **task seeds** pick which environments are played (`env.reset(seed=...)`): training groups, their
  dynamic-sampling re-draws, held-out evaluation tasks and warm-up demonstrations. They live in
  disjoint integer ranges (training from `env.train_seed_start`, evaluation from
  `env.eval_seed_start`, demonstrations 5e9 above the training start), and depend only on
  (run seed, iteration, draw), so paired runs play the same tasks and a resumed run replays the
  iterations a crash interrupted.
- **sampling seeds** drive the model's random draws and the trainer's shuffles.

A generate call seeded s gives prompt i the seed s + i on per-request backends (vLLM in process or
behind a server), or seeds the whole call with s (HF). A batched rollout makes one call per turn, so
`turn_seed` leaves the low 16 bits of each call's seed free: the seeds of one call's prompts never
reach another call's. (Until issue 27 the turn seed was `seed * 1000 + turn`: on vLLM prompt i + 1 of
turn t drew with the seed of prompt i of turn t + 1, and every dynamic-sampling draw of an iteration
repeated draw 0's seeds.)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # only the fields are read: no import of the config module at run time
    from gigpo.config import Config, EnvConfig, TrainerConfig

RUN_STRIDE_TASKS = 10_000_000
"""Training task seeds of run seed s start at train_seed_start + s * RUN_STRIDE_TASKS."""
DEMO_OFFSET = 5_000_000_000
"""Warm-up demonstrations are played on tasks this far above the training tasks (never trained on)."""
DEMO_STRIDE = 100_000
RUN_STRIDE_SAMPLING = 100_003
"""Sampling seed of run seed s, iteration i: s * RUN_STRIDE_SAMPLING + i."""
DRAW_STRIDE = 2**40
"""Dynamic sampling's re-draw d of an iteration adds d * DRAW_STRIDE to its sampling seed."""
REQUESTS_PER_CALL = 2**16
"""Prompts one generate call may seed (seed + i, i below this) without reaching another call's seeds."""


# --------------------------------------------------------------------------- task seeds

def train_seeds(config: "Config", iteration: int, draw: int = 0) -> list[int]:
    """Task seeds of an iteration's B groups (draw > 0: dynamic sampling's re-draws); disjoint per run seed."""
    b = config.env.num_groups
    slot = (iteration - 1) * (config.algorithm.max_resample + 1) + draw
    base = config.env.train_seed_start + config.trainer.seed * RUN_STRIDE_TASKS + slot * b
    return list(range(base, base + b))


def eval_seeds(config: "Config", episodes: int | None = None) -> list[int]:
    """Task seeds of the held-out evaluation (the same for every run seed, so runs are compared on one set)."""
    n = episodes or config.env.eval_episodes
    return list(range(config.env.eval_seed_start, config.env.eval_seed_start + n))


def sft_warmup_seed(trainer: "TrainerConfig") -> int:
    """The warm-up's seed: `trainer.sft_seed` when set (one warm-up shared by every RL seed), else the run's."""
    return trainer.seed if trainer.sft_seed is None else trainer.sft_seed


def demo_seeds(env: "EnvConfig", seed: int, rooms: int) -> list[int]:
    """Task seeds of the warm-up's demonstrations (`seed`: `sft_warmup_seed`), far from any training task."""
    base = env.train_seed_start + DEMO_OFFSET + seed * DEMO_STRIDE
    return [base + i for i in range(rooms)]


# --------------------------------------------------------------------------- sampling seeds

def rollout_sampling_seed(run_seed: int, iteration: int, draw: int = 0) -> int:
    """The sampling seed of iteration `iteration`'s training rollout, draw `draw` (dynamic sampling's re-draws)."""
    return run_seed * RUN_STRIDE_SAMPLING + iteration + draw * DRAW_STRIDE


def eval_sampling_seed(run_seed: int) -> int:
    """The sampling seed of an evaluation rollout (matters only at `rollout.eval_temperature` > 0)."""
    return run_seed


def turn_seed(seed: int, turn: int, requests: int) -> int:
    """The seed of a batched rollout's generate call at turn `turn` (`requests` prompts), for a rollout
    seeded `seed`: a 47-bit hash of (seed, turn) shifted up 16 bits, so prompt i's seed + i stays inside
    this call's own range (ranges of two calls meet only if their hashes collide, 2**-47 a pair)."""
    if requests > REQUESTS_PER_CALL:
        raise ValueError(f"a generate call of {requests} prompts: per-prompt seeds would reach the next call's; "
                         f"at most {REQUESTS_PER_CALL} prompts a turn (fewer env.num_groups x env.group_size)")
    state = np.random.SeedSequence([seed % 2**64, turn]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(17)) << 16


def request_seed(seed: int, traj: int, step: int) -> int:
    """Async turns: a 31-bit seed for one request, a function of (seed, trajectory, step) only (no
    collisions in practice), so a run repeats whatever order requests finish in."""
    return int(np.random.SeedSequence([seed % 2**64, traj, step]).generate_state(1)[0] >> 1)


def probe_seed(run_seed: int, iteration: int) -> int:
    """Which samples the trainer re-scores to log the generator/trainer log-prob gap."""
    return run_seed * 7_919 + iteration


def placebo_order(rows: int, seed: int, iteration: int) -> np.ndarray:
    """`algorithm.shuffle_advantages`: row i trains on row `order[i]`'s advantage, an order drawn from
    (seed, iteration) alone. Indices, so the logged parts (episode, step) can follow the advantage."""
    return np.random.default_rng([seed, iteration]).permutation(rows)


def placebo_advantages(advantage: np.ndarray, seed: int, iteration: int) -> np.ndarray:
    """The placebo's advantages: the same values in `placebo_order`."""
    return advantage[placebo_order(len(advantage), seed, iteration)]


def minibatch_seed(run_seed: int, update: int) -> int:
    """The shuffle of the `update`-th call of an engine's update() into mini-batches."""
    return run_seed * 1_000_003 + update


RANK_STRIDE_SAMPLING = 2**52
"""Rank r > 0 of a rollout split over ranks adds r * this to a batched rollout's sampling seed."""


def rank_sampling_seed(seed: int | None, rank: int, per_request: bool) -> int | None:
    """The sampling seed rank `rank` plays its share of a rollout seeded `seed` with (gigpo.trainer.sharding).
    Per-request seeds (async turns) key each request by (seed, trajectory, step), trajectory ids are global,
    so every rank takes `seed` and N ranks draw what one rank would. Batched turns seed a whole generate
    call, so ranks sharing a seed would draw the same numbers for different groups: each rank gets its
    own (rank 0 `seed` itself, so one rank plays as it always did)."""
    if seed is None or per_request or rank == 0:
        return seed
    return seed + rank * RANK_STRIDE_SAMPLING
