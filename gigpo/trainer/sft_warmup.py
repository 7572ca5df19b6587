"""Supervised warm-up on expert demonstrations, for locally built models that know no language.

A model built by `gigpo model init` starts from random weights: RL from there never sees a reward.
A short supervised phase on (prompt, expert action) pairs teaches the action format and a weak
policy; stopping it early keeps the start weak, so RL has room to show what it adds. The pairs come
from `gigpo.envs.demos.collect_demonstrations` (states of a mixed expert/random policy, expert labels).

This runs in one process with plain PyTorch before the DeepSpeed engines exist: it is meant for the
small models of tests and CPU demos. The result is saved as a Hugging Face model that the RL phase
loads like any other, and that `gigpo eval` can score as the warm-up baseline.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from gigpo.config import LoggingConfig
from gigpo.infra.cpu_bf16 import bf16_matmuls
from gigpo.infra.progress import Progress
from gigpo.trainer.action_tokens import action_token_mask
from gigpo.trainer.memory import release_freed_memory


def response_ids(tokenizer, action: str) -> list[int]:
    """The token ids of a well-formed answer naming `action`, ending with the end-of-turn token."""
    return tokenizer(f"<action>{action}</action>", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


_LOGGING = LoggingConfig()
#: The warm-up's freed memory goes back to the kernel at most this often (seconds): see supervised_warmup.
TRIM_EVERY_S = 5.0


def supervised_warmup(model_path: str, out_dir: Path, pairs: list[tuple[list[int], list[int]]], steps: int,
                      lr: float, batch_size: int, seed: int, progress: bool = _LOGGING.progress, dtype: str = "fp32",
                      after_step: Optional[Callable[[int, Any], None]] = None,
                      action_share: Optional[float] = None, micro_tokens: Optional[int] = None,
                      trim_every_s: Optional[float] = TRIM_EVERY_S, lora_rank: int = 0) -> Path:
    """Train on `pairs` (cross-entropy on response tokens) for `steps` AdamW steps; save to out_dir/hf.

    `action_share` (trainer.sft_action_share): the share of each answer's loss on the tokens inside its
    <action> tags, the rest spread over the format tokens; None weighs every answer token the same.

    `micro_tokens` (trainer.sft_micro_tokens): a batch whose padded size (rows x longest) exceeds it is
    split into micro-batches, see `batch_loss_backward`; None never splits.

    `lora_rank` (trainer.sft_lora_rank): 0 trains every weight; r > 0 trains rank-r LoRA adapters only, keeps them
    in out_dir/hf/adapter and saves the base with them merged (gigpo/trainer/warmup_lora.py), so that the warm-up
    can be committed as an artifact of a few MB.

    `after_step(step, model)` runs after each step (1-based), e.g. to evaluate a learning curve; the
    model is back in training mode when it returns.

    `trim_every_s`: hand freed memory back to the kernel (`malloc_trim`) after a step once this many seconds
    have passed since the last trim; 0 trims after every step, None never. Without it glibc keeps the freed
    activations in its heap, and micro-batches of other shapes add to it: SmolLM2-135M's warm-up on ALFWorld
    prompts held 10.5 GB, 5.1 GB of it live. A trim costs a fraction of a second, which is nothing beside a
    20-s SmolLM2 step (trimmed every step by this rule) but 1.29x a 0.4-s tiny-model step if done every time
    (benchmarks/bench_warmup_memory.py).

    Weights and optimizer stay fp32; with `dtype="bf16"` (the recipe's model.dtype) the forward and
    backward run under bf16 autocast, 2.5x less CPU time per step for SmolLM2-135M (5.4 s against 13.7
    s at one thread, batch 16 x 78 tokens), which decides whether a real model's warm-up fits a budget. A CPU
    without native bf16 runs those bf16 matmuls in fp32 kernels (gigpo.infra.cpu_bf16), else a step takes minutes.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not pairs:
        raise RuntimeError("supervised warm-up found no expert demonstrations: does the environment have an expert?")
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # fp32 on either: the warm-up is short
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if lora_rank:
        from gigpo.trainer.warmup_lora import lora_for_warmup

        model = lora_for_warmup(model, lora_rank)
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]  # every weight, or the adapters only
    optimizer = torch.optim.AdamW(trained, lr=lr)
    rng = random.Random(seed)
    pad = tokenizer.pad_token_id
    weights_of = AnswerWeights(tokenizer, action_share) if action_share is not None else None
    bar = Progress("warm-up (supervised)", total=steps, unit="step", enabled=progress)  # a log file: lines, no bar
    # without a bar (logging.progress=false: logs of `gigpo compare` runs) a line every tenth of the way,
    # so minutes of warm-up are not silent
    report_every, start = max(1, steps // 10), time.monotonic()
    last_trim = start
    for step in bar.iterate(range(steps)):
        batch = [pairs[rng.randrange(len(pairs))] for _ in range(batch_size)]
        optimizer.zero_grad()
        with bf16_matmuls(dtype):
            loss = batch_loss_backward(model, batch, pad, weights_of, micro_tokens, device, bf16=dtype == "bf16")
        if not torch.isfinite(loss):
            raise RuntimeError(f"supervised warm-up loss became {loss.item()}; lower trainer.sft_lr={lr}")
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        if trim_every_s is not None and time.monotonic() - last_trim >= trim_every_s:
            release_freed_memory()
            last_trim = time.monotonic()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if after_step is not None:
            after_step(step + 1, model)
            model.train()
        if not progress and ((step + 1) % report_every == 0 or step + 1 == steps):
            print(f"warm-up: step {step + 1}/{steps}  loss={loss.item():.3f}  "
                  f"elapsed={time.monotonic() - start:.0f}s", flush=True)
    target = Path(out_dir) / "hf"
    staging = Path(out_dir) / "hf.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    if lora_rank:  # the adapters, then the base with them merged exactly as an installed artifact is
        from gigpo.trainer.warmup_lora import ADAPTER_DIR, merge_into_base, save_adapters

        save_adapters(model, model_path, staging / ADAPTER_DIR)
        merge_into_base(model_path, staging / ADAPTER_DIR, staging)
    else:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
    staging.rename(target)
    return target


def batch_loss_backward(model, batch: Sequence[tuple[list[int], list[int]]], pad: int,
                        weights_of: Optional["AnswerWeights"], micro_tokens: Optional[int], device,
                        bf16: bool = False) -> torch.Tensor:
    """The batch's loss, with its gradient accumulated into the model; returns the loss (detached).
    Forwards run under bf16 autocast when `bf16`, backwards outside it.

    A batch that fits `micro_tokens` (rows x longest row) runs as one right-padded forward through the
    model's own loss, as before. A larger one (ALFWorld: 128 prompts of 300-1000 tokens) would pad every row
    to the longest and run attention and the LM head over all of it: there the rows are sorted by length
    and cut into micro-batches that fit the budget, each padded to its own longest row, and only the
    positions that predict answer tokens go through the LM head. Each micro-batch's loss is its share of
    the batch's loss (the same normaliser), so the gradient equals the one-forward gradient up to float
    summation order.
    """
    width = max(len(p) + len(r) for p, r in batch)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
    if micro_tokens is None or len(batch) * width <= micro_tokens:
        ids, labels, attention = answer_batch(batch, pad)
        with autocast:
            if weights_of is None:
                loss = model(input_ids=ids.to(device), attention_mask=attention.to(device), labels=labels.to(device)).loss
            else:
                logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
                loss = weighted_answer_loss(logits, labels.to(device), weights_of.rows(batch, width).to(device))
        if torch.isfinite(loss):
            loss.backward()
        return loss.detach()
    # the model's loss is a mean over answer tokens; the weighted loss sums weights and divides by rows
    normaliser = float(len(batch)) if weights_of is not None else float(sum(len(r) for _, r in batch))
    total = torch.zeros((), device=device)
    for rows in micro_batches([len(p) + len(r) for p, r in batch], micro_tokens):
        with autocast:
            loss = answer_positions_loss(model, [batch[i] for i in rows], pad, weights_of, device) / normaliser
        if not torch.isfinite(loss):
            return loss.detach()
        loss.backward()
        total += loss.detach()
    return total


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Row indices sorted by length, cut into runs whose rows x longest row fit `budget` (at least one row each)."""
    runs: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda k: lengths[k]):
        if runs and (len(runs[-1]) + 1) * lengths[i] <= budget:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def answer_positions_loss(model, batch: Sequence[tuple[list[int], list[int]]], pad: int,
                          weights_of: Optional["AnswerWeights"], device) -> torch.Tensor:
    """Summed (weighted) cross-entropy of the answers, with the LM head run only where an answer token is predicted.

    Rows are right-padded and attention is causal, so no real token can see a pad: no attention mask is
    passed, which lets SDPA take its causal path instead of a dense mask.
    """
    ids, _, _ = answer_batch(batch, pad)
    rows, positions, targets, weights = [], [], [], []
    for row, (prompt, response) in enumerate(batch):
        rows += [row] * len(response)
        positions += range(len(prompt) - 1, len(prompt) + len(response) - 1)  # position t predicts token t + 1
        targets += response
        weights += weights_of.answer(response) if weights_of is not None else [1.0] * len(response)
    hidden = model.get_decoder()(input_ids=ids.to(device)).last_hidden_state
    picked = hidden[torch.tensor(rows, device=device), torch.tensor(positions, device=device)]
    logits = model.get_output_embeddings()(picked).float()
    token_ce = torch.nn.functional.cross_entropy(logits, torch.tensor(targets, device=device), reduction="none")
    return (token_ce * torch.tensor(weights, device=device)).sum()


def answer_batch(batch: Sequence[tuple[list[int], list[int]]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prompt, answer) pairs -> right-padded input ids, labels (-100 outside the answers), attention mask."""
    width = max(len(p) + len(r) for p, r in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (prompt, response) in enumerate(batch):
        seq = prompt + response
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, len(prompt): len(seq)] = torch.tensor(response)
        attention[row, : len(seq)] = 1
    return ids, labels, attention


class AnswerWeights:
    """Per-token loss weights of answers: `share` on the action's tokens, 1 - share on the rest, per answer.

    Answers repeat (one per action), so each answer's mask is computed once.
    """

    def __init__(self, tokenizer, share: float):
        self.tokenizer, self.share = tokenizer, share
        self._cache: dict[tuple[int, ...], list[float]] = {}

    def answer(self, response: Sequence[int]) -> list[float]:
        key = tuple(response)
        if key not in self._cache:
            mask = action_token_mask(self.tokenizer, response)
            n_action = sum(mask)
            n_other = len(mask) - n_action
            if n_action == 0 or n_other == 0:  # nothing to balance: a plain mean over the answer
                self._cache[key] = [1.0 / len(mask)] * len(mask)
            else:
                self._cache[key] = [self.share / n_action if m else (1.0 - self.share) / n_other for m in mask]
        return self._cache[key]

    def rows(self, batch: Sequence[tuple[list[int], list[int]]], width: int) -> torch.Tensor:
        """(len(batch), width) weights aligned with the labels: zero outside each answer."""
        weights = torch.zeros((len(batch), width))
        for row, (prompt, response) in enumerate(batch):
            weights[row, len(prompt): len(prompt) + len(response)] = torch.tensor(self.answer(response))
        return weights


def weighted_answer_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Sum over tokens of weight x cross-entropy (logits at t predict the label at t+1), averaged over rows."""
    targets = labels[:, 1:]
    token_ce = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1), ignore_index=-100, reduction="none")
    return (token_ce.view_as(targets) * weights[:, 1:]).sum() / labels.shape[0]


def warmup_cache_key(settings: dict[str, Any]) -> str:
    """A digest of everything a warm-up's result depends on, environment code included.

    `settings` holds the model source, the env and prompt settings and the sft_* knobs; the sources of
    gigpo/envs, of this file and of the LoRA merge (warmup_lora.py) are hashed too, so changing how rooms or labels are made (or how the
    warm-up trains) never reuses a stale result.
    """
    digest = hashlib.blake2b(json.dumps(settings, sort_keys=True, default=str).encode(), digest_size=10)
    package = Path(__file__).resolve().parents[1]
    here = Path(__file__).resolve()
    for source in sorted((package / "envs").rglob("*.py")) + [here, here.with_name("warmup_lora.py")]:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def cached_warmup(cache_root: Path, key: str, out_dir: Path, build: Callable[[Path], Path]) -> Path:
    """out_dir/hf from the cache when this exact warm-up was done before, else build it and store a copy.

    Runs of one comparison that share a seed share the warm-up (about a minute and a half each on CPU).
    Concurrent runs may both build; the first to finish fills the cache and the other's copy is dropped.
    """
    target = Path(out_dir) / "hf"
    cached = Path(cache_root) / key
    if (cached / "config.json").is_file():
        staging = Path(out_dir) / "hf.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(cached, staging)
        staging.rename(target)
        print(f"warm-up: reusing {cached}", flush=True)
        return target
    build(Path(out_dir))
    cache_root = Path(cache_root)
    cache_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_root))
    try:
        shutil.copytree(target, staging, dirs_exist_ok=True)
        try:
            staging.rename(cached)
        except OSError:  # another run stored the same warm-up first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
