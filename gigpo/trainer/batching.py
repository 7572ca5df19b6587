"""Training samples and their grouping into micro-batches by token budget (dynamic batch size).

Two layouts, same results (tests/trainer/test_engines.py checks both against plain HF forwards):
- "packed": one row, samples concatenated without padding, position ids restarting at 0 per
  sample. transformers detects the restarts (`masking_utils.find_packed_sequence_indices`) and masks
  attention block-diagonally. No padding at all, and with a varlen kernel (flash-attention) attention
  costs sum(L_i^2); with SDPA or eager (CPU) the mask is dense and attention costs (sum L_i)^2.
- "padded": samples sorted by length, cut into runs whose rows x longest fit the budget, left-padded
  so every response ends at the last column. Attention costs rows x W^2 with any kernel; the padding
  share is reported. This is what runs on CPU (`trainer.layout=auto`).
In both, only the positions that predict response tokens go through the LM head (`logits_to_keep`).

With several ranks, every rank holds the whole batch (rank 0 broadcasts it) and computes the same
plan; each rank then runs its share of micro-batches. Ranks must run the same number of forwards and
backwards (ZeRO reduces gradients inside backward), so the plan splits micro-batches, or adds a
zero-weight dummy one, until their count divides the world size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Sequence

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


Layout = Literal["packed", "padded"]
LAYOUTS: tuple[str, ...] = ("packed", "padded")


@dataclass
class MicroBatch:
    """Samples laid out as B rows of width W; n samples with at most Rmax response tokens each."""

    sample_indices: list[int]
    input_ids: Tensor       # (B, W) int64
    position_ids: Tensor    # (B, W) int64
    attention_mask: Optional[Tensor]  # (B, W) int64 for "padded"; None for "packed" (positions say it)
    logits_to_keep: int | Tensor
    """Passed to the model: the last k columns (padded) or these column indices (packed)."""
    kept_index: Tensor      # (n, Rmax) into the flattened (B * kept) LM-head outputs
    kept_targets: Tensor    # (B * kept,) int64, the token each kept position predicts (0 if none)
    predict_index: Tensor   # (n, Rmax) into the flattened (B * W) positions (for per-position heads)
    mask: Tensor            # (n, Rmax) float32, 1 on real response tokens
    num_real_tokens: int
    dummy: bool = False
    """A zero-weight filler so every rank runs the same number of micro-batches; outputs are discarded."""
    fields: dict[str, Tensor] = field(default_factory=dict)
    """(n, Rmax) float32 per-token training signals present on every sample: advantage, logp_old, ..."""

    def to(self, device: torch.device | str) -> "MicroBatch":
        """The same micro-batch with every tensor on `device` (a no-op on CPU)."""
        move = lambda t: t if t is None or not isinstance(t, Tensor) else t.to(device, non_blocking=True)  # noqa: E731
        return MicroBatch(self.sample_indices, move(self.input_ids), move(self.position_ids),
                          move(self.attention_mask), move(self.logits_to_keep), move(self.kept_index),
                          move(self.kept_targets), move(self.predict_index), move(self.mask), self.num_real_tokens,
                          self.dummy, {k: move(v) for k, v in self.fields.items()})

    @property
    def num_tokens(self) -> int:
        """Tokens the model processes, padding included."""
        return int(self.input_ids.numel())

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


def _check_fits(lengths: Sequence[int], budget: int) -> None:
    for i, n in enumerate(lengths):
        if n > budget:
            raise TokenBudgetError(f"sample {i} has {n} tokens, more than trainer.micro_token_budget={budget}; "
                                   f"raise the budget to at least {n} or shorten prompts/responses")


def pack_by_budget(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """First-fit decreasing: group sample indices into bins of at most `budget` tokens each."""
    _check_fits(lengths, budget)
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


def bucket_by_length(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Sort by length and cut into runs whose (rows x longest) padded size fits `budget`."""
    _check_fits(lengths, budget)
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    for i in order:
        if bins and (len(bins[-1]) + 1) * lengths[bins[-1][0]] <= budget:
            bins[-1].append(i)  # sorted descending: the run's first sample is its longest
        else:
            bins.append([i])
    return [sorted(b) for b in bins]


def plan_micro_batches(lengths: Sequence[int], budget: int, world_size: int = 1,
                       layout: Layout = "packed") -> list[list[tuple[list[int], bool]]]:
    """Per rank, the micro-batches (sample indices, is_dummy) it runs; every rank gets the same count.

    Bins are split (largest multi-sample bin first) until their number divides `world_size`; if no bin
    can be split, a dummy bin repeating the shortest sample fills the gap. Bins go to ranks greedily by
    token count, so ranks do similar work.
    """
    if not lengths:
        raise ValueError("no samples to plan micro-batches for")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is unknown; choose one of {', '.join(LAYOUTS)}")
    grouped = pack_by_budget(lengths, budget) if layout == "packed" else bucket_by_length(lengths, budget)
    bins = [(b, False) for b in grouped]
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


def _packed_rows(chosen: Sequence[TrainSample]):
    """One row; kept columns are exactly the positions predicting response tokens."""
    ids: list[int] = []
    pos: list[int] = []
    keep: list[int] = []
    kept_rows: list[list[int]] = []
    predict_rows: list[list[int]] = []
    for s in chosen:
        start, p, r = len(ids), len(s.prompt_ids), len(s.response_ids)
        ids += s.prompt_ids + s.response_ids
        pos += range(p + r)
        # the output at position t predicts token t+1: response token j is predicted at start+p-1+j
        predict = list(range(start + p - 1, start + p - 1 + r))
        kept_rows.append(list(range(len(keep), len(keep) + r)))
        predict_rows.append(predict)
        keep += predict
    input_ids = torch.tensor([ids])
    keep_t = torch.tensor(keep)
    kept_targets = input_ids[0, keep_t + 1]
    return input_ids, torch.tensor([pos]), None, keep_t, kept_rows, kept_targets, predict_rows


def _padded_rows(chosen: Sequence[TrainSample]):
    """Left-padded rows ending together; kept columns are the last max_R + 1 (shared by all rows)."""
    width = max(len(s) for s in chosen)
    keep = max(len(s.response_ids) for s in chosen) + 1
    input_ids = torch.zeros(len(chosen), width, dtype=torch.long)
    attention = torch.zeros(len(chosen), width, dtype=torch.long)
    position = torch.zeros(len(chosen), width, dtype=torch.long)
    kept_targets = torch.zeros(len(chosen), keep, dtype=torch.long)
    kept_rows: list[list[int]] = []
    predict_rows: list[list[int]] = []
    for k, s in enumerate(chosen):
        seq, r = s.prompt_ids + s.response_ids, len(s.response_ids)
        input_ids[k, width - len(seq):] = torch.tensor(seq)
        attention[k, width - len(seq):] = 1
        position[k, width - len(seq):] = torch.arange(len(seq))
        # response token j sits at column width-r+j and is predicted at column width-r-1+j,
        # which is kept column (width-r-1+j) - (width-keep) = keep-r-1+j
        cols = list(range(keep - r - 1, keep - 1))
        kept_targets[k, cols] = torch.tensor(s.response_ids)
        kept_rows.append([k * keep + c for c in cols])
        predict_rows.append([k * width + width - r - 1 + j for j in range(r)])
    return input_ids, position, attention, keep, kept_rows, kept_targets.reshape(-1), predict_rows


def collate(samples: Sequence[TrainSample], indices: Sequence[int], dummy: bool = False,
            layout: Layout = "packed") -> MicroBatch:
    """Lay `samples[indices]` out as rows (see the module doc) and their per-token signals as (n, Rmax)."""
    chosen = [samples[i] for i in indices]
    rows = _packed_rows(chosen) if layout == "packed" else _padded_rows(chosen)
    input_ids, position_ids, attention_mask, logits_to_keep, kept_rows, kept_targets, predict_rows = rows
    n, rmax = len(chosen), max(len(s.response_ids) for s in chosen)
    kept_index = torch.zeros(n, rmax, dtype=torch.long)
    predict_index = torch.zeros(n, rmax, dtype=torch.long)
    mask = torch.zeros(n, rmax)
    for k, (kept, predict) in enumerate(zip(kept_rows, predict_rows)):
        kept_index[k, :len(kept)] = torch.tensor(kept)
        predict_index[k, :len(predict)] = torch.tensor(predict)
        mask[k, :len(kept)] = 1.0
    fields: dict[str, Tensor] = {}
    for name in TOKEN_FIELDS:
        values = [_per_token(s, name) for s in chosen]
        if any(v is None for v in values):
            continue
        stacked = torch.zeros(n, rmax)
        for k, v in enumerate(values):
            stacked[k, : v.shape[0]] = v
        fields[name] = stacked
    return MicroBatch(list(indices), input_ids, position_ids, attention_mask, logits_to_keep, kept_index,
                      kept_targets, predict_index, mask, sum(len(s) for s in chosen), dummy, fields)


def unpad(values: Tensor, mask: Tensor) -> list[Tensor]:
    """(n, Rmax) per-token values -> one (R_i,) CPU tensor per sample."""
    lengths = mask.sum(-1).long().tolist()
    return [values[k, :r].detach().to("cpu", copy=True) for k, r in enumerate(lengths)]
