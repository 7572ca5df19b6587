"""Training samples and their grouping into micro-batches by token budget (dynamic batch size).

Two layouts, same results (tests/trainer/test_engines.py checks both against plain HF forwards):
- "packed": one row, samples concatenated without padding, position ids restarting at 0 per
  sample. transformers detects the restarts (`masking_utils.find_packed_sequence_indices`) and masks
  attention block-diagonally. No padding at all, and with a varlen kernel (flash-attention) attention
  costs sum(L_i^2); with SDPA or eager (CPU) the mask is dense and attention costs (sum L_i)^2.
- "padded": samples sorted by length, cut into runs whose rows x longest fit the budget, left-padded
  so every response ends at the last column. Attention costs rows x W^2 with any kernel; the padding
  share is reported. This is what runs on CPU (`trainer.layout=auto`).
- "shared": samples whose prompts are identical share one row: the prompt once, then each response
  after it, every response attending to the prompt and to itself only (an explicit 4-D mask) with
  positions continuing from the prompt. Gradients and log-probs equal the padded layout's (up to
  float summation order), but the prompt's forward and backward are paid once per row instead of
  once per sample. In group-based RL the same prompt recurs often (the N trajectories of a group
  start from one state, and GiGPO's anchor states are exactly the repeated ones), so this is where
  the CPU's time goes down most. Rows are left-padded so prompts end at one column, and any kernel
  that takes a dense mask runs it (SDPA, eager); not flash-attention.
In all three, only the positions that predict response tokens go through the LM head (`logits_to_keep`).

With several ranks, every rank holds only the samples of its own task groups and plans its own
micro-batches (`plan_micro_batches(..., world_size=1)`). Ranks must still run the same number of forwards
and backwards (ZeRO gathers parameters in forward and reduces gradients inside backward), so the engines
agree on the largest count over ranks and `pad_plan` fills the gap with zero-weight dummy micro-batches:
the rank's shortest sample, or `filler_sample()` on a rank that holds none. `plan_micro_batches` can
also split one batch over `world_size` ranks (each rank runs its share of the bins).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional, Sequence

import torch
from torch import Tensor

from gigpo.trainer.losses import distinct_rows


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
    action_mask: Optional[Tensor] = None
    """(R,) 1 on the tokens that spell the action (gigpo.trainer.action_tokens), for per-action diagnostics."""
    logp_behaviour: Optional[Tensor] = None
    """(R,) log-probs the generator sampled the response with, for the rollout correction
    (gigpo.trainer.rollout_correction); None when the correction is off."""

    def __post_init__(self) -> None:
        if not self.response_ids:
            raise ValueError("TrainSample.response_ids is empty: a step must have at least one response token")
        if not self.prompt_ids:
            raise ValueError("TrainSample.prompt_ids is empty: the first response token needs a prompt to condition on")
        for name in ("logp_old", "logp_ref", "returns", "values_old", "action_mask", "logp_behaviour"):
            value = getattr(self, name)
            if value is not None and value.shape != (len(self.response_ids),):
                raise ValueError(f"TrainSample.{name} has shape {tuple(value.shape)}, expected ({len(self.response_ids)},) "
                                 "= one entry per response token")
        if isinstance(self.advantage, Tensor) and self.advantage.dim() > 0 and self.advantage.shape != (len(self.response_ids),):
            raise ValueError(f"TrainSample.advantage has shape {tuple(self.advantage.shape)}; give a float or one "
                             f"value per response token ({len(self.response_ids)})")

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


Layout = Literal["packed", "padded", "shared"]
LAYOUTS: tuple[str, ...] = ("packed", "padded", "shared")


@dataclass
class MicroBatch:
    """Samples laid out as B rows of width W; n samples with at most Rmax response tokens each."""

    sample_indices: list[int]
    input_ids: Tensor       # (B, W) int64
    position_ids: Tensor    # (B, W) int64
    attention_mask: Optional[Tensor]
    """(B, W) int64 for "padded"; (B, 1, W, W) float32 additive for "shared"; None for "packed" (positions say it)."""
    logits_to_keep: int | Tensor
    """Passed to the model: the last k columns (padded) or these column indices (packed)."""
    kept_index: Tensor      # (n, Rmax) into the flattened (B * kept) LM-head outputs
    kept_targets: Tensor    # (n, Rmax) int64, the response tokens: kept position kept_index[i, j] predicts kept_targets[i, j]
    kept_used: Tensor       # (U,) the distinct kept positions that kept_index reads, sorted
    kept_slot: Tensor       # (n * Rmax,) each kept_index entry's index into kept_used (losses.distinct_rows)
    predict_index: Tensor   # (n, Rmax) into the flattened (B * W) positions (for per-position heads)
    mask: Tensor            # (n, Rmax) float32, 1 on real response tokens
    num_real_tokens: int
    dummy: bool = False
    """A zero-weight filler so every rank runs the same number of micro-batches; outputs are discarded."""
    fields: dict[str, Tensor] = field(default_factory=dict)
    """(n, Rmax) float32 per-token training signals present on every sample: advantage, logp_old, ..."""

    def to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> "MicroBatch":
        """The same micro-batch with every tensor on `device` (a no-op on CPU); a 4-D boolean attention
        mask (shared layout) becomes an additive mask in `dtype`, the model's compute dtype."""
        move = lambda t: t if t is None or not isinstance(t, Tensor) else t.to(device, non_blocking=True)  # noqa: E731
        attention = move(self.attention_mask)
        if attention is not None and attention.dtype == torch.bool and attention.dim() == 4:
            attention = additive_mask(attention, dtype)
        return MicroBatch(self.sample_indices, move(self.input_ids), move(self.position_ids),
                          attention, move(self.logits_to_keep), move(self.kept_index),
                          move(self.kept_targets), move(self.kept_used), move(self.kept_slot), move(self.predict_index), move(self.mask), self.num_real_tokens,
                          self.dummy, {k: move(v) for k, v in self.fields.items()})

    @property
    def num_tokens(self) -> int:
        """Tokens the model processes, padding included."""
        return int(self.input_ids.numel())


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


def shared_row_cap(lengths: Sequence[int], budget: int) -> int:
    """Widest row the shared layout builds: 3 samples' worth, so attention (quadratic in the row) stays cheap
    and rows stay similar in width (measured on Sokoban: 2x-4x gave the same update time within noise)."""
    return min(budget, 3 * max(lengths))


def bucket_shared(prompts: Sequence[Sequence[int]], lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Shared layout: rows of same-prompt samples, then bins of rows whose padded size fits `budget`.

    A row holds one prompt and as many of its responses as fit `shared_row_cap`; a bin never holds two
    rows of the same prompt, so `collate` rebuilds exactly these rows by grouping a bin's samples by
    prompt. A bin's padded size is rows x (longest prompt + longest run of responses).
    """
    _check_fits(lengths, budget)
    cap = shared_row_cap(lengths, budget)
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        by_prompt.setdefault(tuple(p), []).append(i)
    rows: list[tuple[tuple[int, ...], list[int], int]] = []  # (prompt, members, responses' tokens)
    for key, members in by_prompt.items():
        row: list[int] = []
        width = len(key)
        for i in members:
            response = lengths[i] - len(key)
            if row and width + response > cap:
                rows.append((key, row, width - len(key)))
                row, width = [], len(key)
            row.append(i)
            width += response
        rows.append((key, row, width - len(key)))
    rows.sort(key=lambda r: (-(len(r[0]) + r[2]), r[1][0]))

    run = {"first": -1, "end": -1, "keys": set(), "prompt": 0, "responses": 0, "repeat": False}

    def padded_size(first: int, end: int) -> Optional[int]:
        """Tokens of the bin rows[first:end] once padded; None where it breaks the budget or repeats a prompt.
        The partition asks for end = first + 1, first + 2, ... in turn, so the last run grows by one row
        (any other order rebuilds it)."""
        if first != run["first"] or end <= run["end"]:
            run.update(first=first, end=first, keys=set(), prompt=0, responses=0, repeat=False)
        for key, _, responses in rows[run["end"]:end]:
            run["repeat"] = run["repeat"] or key in run["keys"]
            run["keys"].add(key)
            run["prompt"], run["responses"] = max(run["prompt"], len(key)), max(run["responses"], responses)
        run["end"] = end
        size = (end - first) * (run["prompt"] + run["responses"])
        return None if run["repeat"] or size > budget else size

    return [sorted(i for key, members, _ in rows[a:b] for i in members)
            for a, b in cheapest_partition(len(rows), padded_size, MICRO_BATCH_OVERHEAD_TOKENS)]


MICRO_BATCH_OVERHEAD_TOKENS = 64
"""What one more micro-batch costs, in padded tokens' worth of work: the shared layout's bins trade
padding against their number. Fitted on sokoban_tiny's update (one CPU thread): about 5-10 ms per
micro-batch against ~0.1 ms per token; the partition is insensitive to it within 2x."""


def cheapest_partition(n: int, size: Callable[[int, int], Optional[int]], overhead: int) -> list[tuple[int, int]]:
    """Cut items 0..n-1, in their order, into runs [a, b) minimising the sum of size(a, b) + overhead.

    `size(a, b)` is a run's padded token count, None where the run is not allowed; a run that is not
    allowed stays so when extended (the budget only fills up), so each start stops at its first refusal.
    It is called with b = a + 1, a + 2, ... in order for each a, so it may grow its last run by one row.
    Dynamic programming over the cut points: with rows sorted by width, runs of equal widths come out
    together and padding is spent only where a bin saved is worth more. A greedy fill (each bin as full
    as the budget allows) had put 26% padding into sokoban_tiny's micro-batches.
    """
    best = [0.0] + [math.inf] * n
    cut = [0] * (n + 1)
    for a in range(n):
        for b in range(a + 1, n + 1):
            tokens = size(a, b)
            if tokens is None:
                break
            if best[a] + tokens + overhead < best[b]:
                best[b], cut[b] = best[a] + tokens + overhead, a
    if math.isinf(best[n]):
        raise TokenBudgetError("a single row does not fit the micro-batch token budget; raise trainer.micro_token_budget")
    runs: list[tuple[int, int]] = []
    b = n
    while b > 0:
        runs.append((cut[b], b))
        b = cut[b]
    return runs[::-1]


def plan_micro_batches(lengths: Sequence[int], budget: int, world_size: int = 1,
                       layout: Layout = "packed", prompts: Optional[Sequence[Sequence[int]]] = None
                       ) -> list[list[tuple[list[int], bool]]]:
    """Per rank, the micro-batches (sample indices, is_dummy) it runs; every rank gets the same count.

    Bins are split (largest multi-sample bin first) until their number divides `world_size`; if no bin
    can be split, a dummy bin repeating the shortest sample fills the gap. Bins go to ranks greedily by
    token count, so ranks do similar work. The shared layout needs each sample's `prompts`.
    """
    if not lengths:
        raise ValueError("no samples to plan micro-batches for")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is unknown; choose one of {', '.join(LAYOUTS)}")
    if layout == "shared":
        if prompts is None or len(prompts) != len(lengths):
            raise ValueError("the shared layout plans by prompt: pass one prompt per sample")
        grouped = bucket_shared(prompts, lengths, budget)
    elif layout == "packed":
        grouped = pack_by_budget(lengths, budget)
    else:
        grouped = bucket_by_length(lengths, budget)
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


Plan = list[tuple[list[int], bool]]
"""One rank's micro-batches: (sample indices, is_dummy) each; a dummy with no indices runs `filler_sample()`."""


def pad_plan(plan: Plan, count: int, lengths: Sequence[int]) -> Plan:
    """`plan` with zero-weight dummy micro-batches appended until it has `count` (the largest plan over
    ranks): each repeats the shortest sample, or, where this rank holds no samples, holds none (the
    engine runs `filler_sample()` there)."""
    if count < len(plan):
        raise ValueError(f"cannot pad a plan of {len(plan)} micro-batches down to {count}")
    filler = [min(range(len(lengths)), key=lambda i: lengths[i])] if len(lengths) else []
    return plan + [(list(filler), True)] * (count - len(plan))


def filler_sample() -> TrainSample:
    """A one-token sample with every per-token field zero, for the dummy micro-batches of a rank that holds
    no samples this time (it must still run the forwards and backwards the others run)."""
    zero = torch.zeros(1)
    return TrainSample([0], [0], 0.0, logp_old=zero, logp_ref=zero, returns=zero, values_old=zero,
                       action_mask=zero, logp_behaviour=zero)


def _per_token(sample: TrainSample, name: str) -> Optional[Tensor]:
    if name == "advantage":
        adv = sample.advantage
        if isinstance(adv, Tensor) and adv.dim() > 0:
            return adv.float()
        return torch.full((len(sample.response_ids),), float(adv))
    value = getattr(sample, name)
    return None if value is None else value.float()


TOKEN_FIELDS = ("advantage", "logp_old", "logp_ref", "returns", "values_old", "action_mask", "logp_behaviour")


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
    return torch.tensor([ids]), torch.tensor([pos]), None, torch.tensor(keep), kept_rows, predict_rows


def _padded_rows(chosen: Sequence[TrainSample]):
    """Left-padded rows ending together; kept columns are the last max_R + 1 (shared by all rows)."""
    width = max(len(s) for s in chosen)
    keep = max(len(s.response_ids) for s in chosen) + 1
    input_ids = torch.zeros(len(chosen), width, dtype=torch.long)
    attention = torch.zeros(len(chosen), width, dtype=torch.long)
    position = torch.zeros(len(chosen), width, dtype=torch.long)
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
        kept_rows.append([k * keep + c for c in cols])
        predict_rows.append([k * width + width - r - 1 + j for j in range(r)])
    return input_ids, position, attention, keep, kept_rows, predict_rows


def _shared_rows(chosen: Sequence[TrainSample]):
    """One row per distinct prompt: [left padding][prompt][response 1][response 2]...[right padding].

    Prompts end at one column C (the widest prompt's end), so the kept columns are the last
    (W - C) of every row: C itself, whose output predicts every response's first token, and the
    response region. Response j's token t sits after the prompt and the responses before it, at
    position P + t, and sees only the prompt and its own earlier tokens.
    """
    rows: dict[tuple[int, ...], list[int]] = {}
    for k, s in enumerate(chosen):
        rows.setdefault(tuple(s.prompt_ids), []).append(k)
    longest_prompt = max(len(p) for p in rows)
    region = max(sum(len(chosen[k].response_ids) for k in members) for members in rows.values())
    width, keep = longest_prompt + region, region + 1
    ids, positions, segments = [], [], []  # segment: -2 padding, -1 prompt, j >= 0 the row's j-th response
    kept_rows: list[list[int]] = [[] for _ in chosen]
    predict_rows: list[list[int]] = [[] for _ in chosen]
    for row, (prompt, members) in enumerate(rows.items()):
        pad = longest_prompt - len(prompt)
        row_ids, row_pos, row_seg = [0] * pad + list(prompt), [0] * pad + list(range(len(prompt))), [-2] * pad + [-1] * len(prompt)
        col = longest_prompt
        for j, k in enumerate(members):
            r = len(chosen[k].response_ids)
            row_ids += chosen[k].response_ids
            row_pos += range(len(prompt), len(prompt) + r)
            row_seg += [j] * r
            # token 0 is predicted at the prompt's last column C (kept column 0), token t at token t-1's
            kept_rows[k] = [row * keep] + [row * keep + col + t - longest_prompt for t in range(1, r)]
            predict_rows[k] = [row * width + longest_prompt - 1] + [row * width + col + t - 1 for t in range(1, r)]
            col += r
        tail = width - len(row_ids)
        ids.append(row_ids + [0] * tail)
        positions.append(row_pos + [0] * tail)
        segments.append(row_seg + [-2] * tail)
    seg = torch.tensor(segments)  # (B, W)
    query, key = seg[:, :, None], seg[:, None, :]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    allowed = causal & (query != -2) & ((key == -1) | ((key == query) & (key >= 0)))
    allowed |= torch.eye(width, dtype=torch.bool)  # padding attends to itself: no empty softmax rows
    # boolean here; MicroBatch.to turns it into an additive mask in the model's own dtype
    return torch.tensor(ids), torch.tensor(positions), allowed[:, None], keep, kept_rows, predict_rows


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean (B, 1, W, W) may-attend mask as the additive mask attention kernels take, in `dtype`.

    Blocked entries get `dtype`'s own lowest finite value, as transformers does. float32's lowest value
    rounds to -inf in bfloat16; on an H200 this layout then gave NaN log-probs in bf16 (padding did not),
    most likely because fused CUDA attention turns a key block that is all -inf into NaN.
    """
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)


def collate(samples: Sequence[TrainSample], indices: Sequence[int], dummy: bool = False,
            layout: Layout = "packed") -> MicroBatch:
    """Lay `samples[indices]` out as rows (see the module doc) and their per-token signals as (n, Rmax)."""
    chosen = [samples[i] for i in indices]
    build = {"packed": _packed_rows, "padded": _padded_rows, "shared": _shared_rows}[layout]
    input_ids, position_ids, attention_mask, logits_to_keep, kept_rows, predict_rows = build(chosen)
    n, rmax = len(chosen), max(len(s.response_ids) for s in chosen)
    kept_index = torch.zeros(n, rmax, dtype=torch.long)
    kept_targets = torch.zeros(n, rmax, dtype=torch.long)
    predict_index = torch.zeros(n, rmax, dtype=torch.long)
    mask = torch.zeros(n, rmax)
    for k, (kept, predict) in enumerate(zip(kept_rows, predict_rows)):
        kept_index[k, :len(kept)] = torch.tensor(kept)
        kept_targets[k, :len(kept)] = torch.tensor(chosen[k].response_ids)
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
    real = sum(len(s) for s in chosen)
    if layout == "shared":  # each distinct prompt is laid out once
        real = sum(len(s.response_ids) for s in chosen) + sum(len(p) for p in {tuple(s.prompt_ids) for s in chosen})
    kept_used, kept_slot = distinct_rows(kept_index.reshape(-1))  # here on the CPU: on a GPU it would wait
    return MicroBatch(list(indices), input_ids, position_ids, attention_mask, logits_to_keep, kept_index,
                      kept_targets, kept_used, kept_slot, predict_index, mask, real, dummy, fields)


def rows_to_host(batches: Sequence[tuple[Sequence[int], Tensor]], lengths: Sequence[int]) -> dict[int, Tensor]:
    """Per-sample (R_i,) CPU tensors from micro-batches' (n, Rmax) device values (`indices`, values), sample i
    the first `lengths[i]` entries of its row: one copy to the host for all of them, where `unpad` per
    micro-batch read its mask and copied each sample (the host waited once per sample)."""
    if not batches:
        return {}
    host = torch.cat([values.detach().reshape(-1) for _, values in batches]).to("cpu", copy=True)
    out, offset = {}, 0
    for indices, values in batches:
        rows = host[offset:offset + values.numel()].view(values.shape)
        offset += values.numel()
        for k, i in enumerate(indices):
            out[i] = rows[k, :lengths[i]].clone()
    return out


def unpad(values: Tensor, mask: Tensor) -> list[Tensor]:
    """(n, Rmax) per-token values -> one (R_i,) CPU tensor per sample."""
    lengths = mask.sum(-1).long().tolist()
    return [values[k, :r].detach().to("cpu", copy=True) for k, r in enumerate(lengths)]
