"""Training samples and their packing into micro-batches by token budget (dynamic batch size).

A micro-batch is one packed row: the samples' prompt+response tokens concatenated without padding,
position ids restarting at 0 for each sample. transformers detects the restarts and masks attention
block-diagonally (`masking_utils.find_packed_sequence_indices`), so each sample sees only itself and
the log-probs equal those of separate forwards (tests/trainer/test_engines.py checks this).
Per-token training targets are gathered into a small (n_samples, max_response) layout for the loss.

With several ranks, every rank holds the whole batch (rank 0 broadcasts it) and computes the same
plan; each rank then runs its share of micro-batches. Ranks must run the same number of forwards and
backwards (ZeRO reduces gradients inside backward), so the plan splits micro-batches, or adds a
zero-weight dummy one, until their count divides the world size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
from torch import Tensor


class TokenBudgetError(ValueError):
    """A sample (or a recipe's longest possible sample) does not fit the micro-batch token budget."""


@dataclass
class TrainSample:
    """One step of one trajectory: what the policy saw, what it wrote, and the training signals.

    Per-token fields have one entry per response token. `advantage` is a step's scalar (broadcast to
    its tokens) or a per-token tensor (PPO with GAE).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float | Tensor = 0.0
    logp_old: Optional[Tensor] = None
    """(R,) log-probs of the response under the policy that generated it (from the actor, pre-update)."""
    logp_ref: Optional[Tensor] = None
    """(R,) log-probs under the frozen reference model, for the KL term."""
    returns: Optional[Tensor] = None
    """(R,) PPO: critic targets."""
    values_old: Optional[Tensor] = None
    """(R,) PPO: critic values before the update (value clipping)."""

    def __post_init__(self) -> None:
        if not self.response_ids:
            raise ValueError("TrainSample.response_ids is empty: a step must have at least one response token")
        if not self.prompt_ids:
            raise ValueError("TrainSample.prompt_ids is empty: the first response token needs a prompt to condition on")
        for name in ("logp_old", "logp_ref", "returns", "values_old"):
            value = getattr(self, name)
            if value is not None and value.shape != (len(self.response_ids),):
                raise ValueError(f"TrainSample.{name} has shape {tuple(value.shape)}, expected ({len(self.response_ids)},) "
                                 "= one entry per response token")
        if isinstance(self.advantage, Tensor) and self.advantage.dim() > 0 and self.advantage.shape != (len(self.response_ids),):
            raise ValueError(f"TrainSample.advantage has shape {tuple(self.advantage.shape)}; give a float or one "
                             f"value per response token ({len(self.response_ids)})")

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass
class MicroBatch:
    """Samples packed into one row. Shapes: L = packed tokens, K = response tokens, n x Rmax targets."""

    sample_indices: list[int]
    input_ids: Tensor      # (1, L) int64
    position_ids: Tensor   # (1, L) int64, restarting at 0 per sample
    keep_positions: Tensor  # (K,) int64, packed positions whose logits predict a response token
    gather_index: Tensor   # (n, Rmax) int64 into keep_positions
    targets: Tensor        # (n, Rmax) int64 response token ids (0 where padded)
    mask: Tensor           # (n, Rmax) float32, 1 on real response tokens
    dummy: bool = False
    """A zero-weight filler so every rank runs the same number of micro-batches; outputs are discarded."""
    fields: dict[str, Tensor] = field(default_factory=dict)
    """(n, Rmax) float32 per-token training signals present on every sample: advantage, logp_old, ..."""

    def to(self, device: torch.device | str) -> "MicroBatch":
        """The same micro-batch with every tensor on `device` (a no-op on CPU)."""
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return MicroBatch(self.sample_indices, move(self.input_ids), move(self.position_ids),
                          move(self.keep_positions), move(self.gather_index), move(self.targets), move(self.mask),
                          self.dummy, {k: move(v) for k, v in self.fields.items()})

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def num_response_tokens(self) -> int:
        return int(self.mask.sum().item())


def check_token_budget(max_prompt_tokens: int, max_new_tokens: int, micro_token_budget: int) -> None:
    """Fail before rollout when the longest possible sample cannot fit one micro-batch."""
    longest = max_prompt_tokens + max_new_tokens
    if longest > micro_token_budget:
        raise TokenBudgetError(
            f"rollout.max_prompt_tokens={max_prompt_tokens} + rollout.max_new_tokens={max_new_tokens} = {longest} "
            f"tokens do not fit trainer.micro_token_budget={micro_token_budget}; raise the budget to at least "
            f"{longest} or shorten prompts/responses")


def pack_by_budget(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """First-fit decreasing: group sample indices into bins of at most `budget` tokens each."""
    for i, n in enumerate(lengths):
        if n > budget:
            raise TokenBudgetError(f"sample {i} has {n} tokens, more than trainer.micro_token_budget={budget}; "
                                   f"raise the budget to at least {n} or shorten prompts/responses")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(budget - lengths[i])
    return [sorted(b) for b in bins]


def plan_micro_batches(lengths: Sequence[int], budget: int, world_size: int = 1) -> list[list[tuple[list[int], bool]]]:
    """Per rank, the micro-batches (sample indices, is_dummy) it runs; every rank gets the same count.

    Bins are split (largest multi-sample bin first) until their number divides `world_size`; if no bin
    can be split, a dummy bin repeating the shortest sample fills the gap. Bins go to ranks greedily by
    token count, so ranks do similar work.
    """
    if not lengths:
        raise ValueError("no samples to plan micro-batches for")
    bins = [(b, False) for b in pack_by_budget(lengths, budget)]
    size = lambda b: sum(lengths[i] for i in b[0])  # noqa: E731
    while len(bins) % world_size:
        splittable = [k for k, b in enumerate(bins) if len(b[0]) > 1]
        if splittable:
            k = max(splittable, key=lambda k: size(bins[k]))
            members = bins.pop(k)[0]
            half = len(members) // 2
            bins += [(members[:half], False), (members[half:], False)]
        else:
            shortest = min(range(len(lengths)), key=lambda i: lengths[i])
            bins.append(([shortest], True))
    per_rank = len(bins) // world_size
    ranks: list[list[tuple[list[int], bool]]] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for b in sorted(bins, key=lambda b: (-size(b), b[0])):
        r = min((r for r in range(world_size) if len(ranks[r]) < per_rank), key=lambda r: (load[r], r))
        ranks[r].append(b)
        load[r] += size(b)
    return ranks


def _per_token(sample: TrainSample, name: str) -> Optional[Tensor]:
    if name == "advantage":
        adv = sample.advantage
        if isinstance(adv, Tensor) and adv.dim() > 0:
            return adv.float()
        return torch.full((len(sample.response_ids),), float(adv))
    value = getattr(sample, name)
    return None if value is None else value.float()


TOKEN_FIELDS = ("advantage", "logp_old", "logp_ref", "returns", "values_old")


def collate(samples: Sequence[TrainSample], indices: Sequence[int], dummy: bool = False) -> MicroBatch:
    """Pack `samples[indices]` into one row and lay their per-token signals out as (n, Rmax)."""
    chosen = [samples[i] for i in indices]
    ids: list[int] = []
    pos: list[int] = []
    keep: list[int] = []
    rows: list[list[int]] = []
    for s in chosen:
        start, p, r = len(ids), len(s.prompt_ids), len(s.response_ids)
        ids += s.prompt_ids + s.response_ids
        pos += range(p + r)
        # the logits at position t predict token t+1: response token j is predicted at start+p-1+j
        rows.append(list(range(len(keep), len(keep) + r)))
        keep += range(start + p - 1, start + p - 1 + r)
    n, rmax = len(chosen), max(len(s.response_ids) for s in chosen)
    gather = torch.zeros(n, rmax, dtype=torch.long)
    targets = torch.zeros(n, rmax, dtype=torch.long)
    mask = torch.zeros(n, rmax)
    for k, (s, row) in enumerate(zip(chosen, rows)):
        r = len(row)
        gather[k, :r] = torch.tensor(row)
        targets[k, :r] = torch.tensor(s.response_ids)
        mask[k, :r] = 1.0
    fields: dict[str, Tensor] = {}
    for name in TOKEN_FIELDS:
        values = [_per_token(s, name) for s in chosen]
        if any(v is None for v in values):
            continue
        stacked = torch.zeros(n, rmax)
        for k, v in enumerate(values):
            stacked[k, : v.shape[0]] = v
        fields[name] = stacked
    return MicroBatch(list(indices), torch.tensor([ids]), torch.tensor([pos]), torch.tensor(keep), gather,
                      targets, mask, dummy, fields)


def unpad(values: Tensor, mask: Tensor) -> list[Tensor]:
    """(n, Rmax) per-token values -> one (R_i,) CPU tensor per sample."""
    lengths = mask.sum(-1).long().tolist()
    return [values[k, :r].detach().to("cpu", copy=True) for k, r in enumerate(lengths)]
