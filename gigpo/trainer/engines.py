"""DeepSpeed engines: the actor (policy being trained), the frozen reference, and PPO's critic.

All three run the same micro-batched forward (gigpo.trainer.batching: padded or packed rows up to a
token budget), with logits only at the positions that predict response tokens (`logits_to_keep`), so
the vocabulary projection costs what the response needs, not the prompt. With several ranks every rank calls the same
method at the same point with its own samples (its own task groups) and gets its own samples' results back: no
sample crosses ranks. Ranks agree on the number of micro-batches (the largest over ranks; the others pad with
zero-weight dummies) and on the loss denominators (sums over ranks), so that the gradient DeepSpeed averages
is the one of every rank's samples together.

Gradient accumulation is caller-owned (`managed_gradient_accumulation: false`): one backward per
micro-batch, however many a mini-batch needs, then one `engine.step()`; losses are divided by the
mini-batch's token (or sequence) count, so the accumulated gradient is exactly the mini-batch's.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Sequence

from gigpo.trainer.distributed import (RankInfo, all_gather_objects, all_reduce_floats, any_rank,
                                       configure_accelerator, init_distributed)

configure_accelerator()

import deepspeed  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402
from torch.optim.lr_scheduler import LambdaLR  # noqa: E402

from gigpo.infra.cpu_bf16 import bf16_matmuls  # noqa: E402
from gigpo.infra.seeds import minibatch_seed  # noqa: E402
from gigpo.trainer.batching import (Layout, MicroBatch, Plan, TrainSample, collate, filler_sample,  # noqa: E402
                                    pad_plan, plan_micro_batches, rows_to_host, unpad)
from gigpo.trainer.losses import (LOGIT_CHUNK_ROWS, aggregate, kl_k3, policy_loss, token_logp_entropy,  # noqa: E402
                                  value_loss)
from gigpo.trainer import lora  # noqa: E402
from gigpo.trainer.rollout_correction import (Correction, SUM as CORRECTION_SUM, corrected_policy_loss,  # noqa: E402
                                               correction_from_config, correction_means,
                                               old_logprobs_from_generator)
from gigpo.trainer.nonfinite import NonFiniteError  # noqa: E402  (the one NaN/inf exception; re-exported)


@dataclass(frozen=True)
class TrainingEngineSettings:
    """How a DeepSpeed engine (actor, reference, critic) is built and fed; the generation engine's are
    gigpo.rollout.engine_settings.EngineSettings. Defaults live in gigpo.config: build with `settings_from_config`."""

    zero_stage: int
    dtype: Literal["bf16", "fp32"]
    gradient_checkpointing: bool
    micro_token_budget: int
    mini_batch_size: Optional[int]
    """Samples per mini-batch when `mini_batches` is None."""
    mini_batches: Optional[int]
    """Mini-batches (optimizer steps) per epoch, whatever the sample count; None: `mini_batch_size` samples each."""
    ppo_epochs: int
    lr: float
    weight_decay: float
    warmup_steps: int
    grad_clip: float
    seed: int
    temperature: float
    """Sampling temperature of the rollout: log-probs are those of logits / temperature."""
    minibatch_by_prompt: bool
    """Shuffle same-prompt samples as one unit when cutting mini-batches (trainer.minibatch_by_prompt)."""
    layout: Literal["auto", "packed", "padded", "shared"]
    """Micro-batch layout (gigpo.trainer.batching); auto: packed with flash-attention, else shared."""
    lora: Optional[lora.LoraSettings] = None
    """Train LoRA adapters (gigpo.trainer.lora) instead of every weight; None: full fine-tuning."""


@dataclass(frozen=True)
class LossSettings:
    """The PPO-clip objective (AlgorithmConfig)."""

    clip_low: float
    clip_high: float
    kl_coef: float
    entropy_coef: float
    loss_agg: Literal["token-mean", "seq-mean"]
    value_clip: Optional[float]
    """Critic: PPO's clipped value loss around values_old (None: plain squared error)."""
    correction: Optional[Correction] = None
    """The rollout correction (gigpo.trainer.rollout_correction); None: off."""
    old_is_behaviour: bool = False
    """logp_old are the generator's own (trainer.old_logprobs: generator): the correction reads live log-probs."""


def settings_from_config(config: Any, critic: bool = False) -> tuple[TrainingEngineSettings, LossSettings]:
    """Engine and loss settings from a gigpo Config (the actor's, or the critic's with `critic=True`)."""
    t, m, a = config.trainer, config.model, config.algorithm
    engine = TrainingEngineSettings(
        zero_stage=t.zero_stage, dtype=m.dtype, gradient_checkpointing=m.gradient_checkpointing,
        micro_token_budget=t.micro_token_budget, mini_batch_size=t.mini_batch_size, mini_batches=t.mini_batches,
        ppo_epochs=t.ppo_epochs, lr=t.critic_lr if critic else t.lr, weight_decay=t.weight_decay,
        warmup_steps=t.warmup_steps,
        grad_clip=t.grad_clip, seed=t.seed,
        temperature=config.rollout.temperature or 1.0,  # greedy rollouts (0): score the plain distribution
        layout=t.layout, minibatch_by_prompt=t.minibatch_by_prompt, lora=lora.lora_settings(config))
    loss = LossSettings(clip_low=a.clip_low, clip_high=a.clip_high, kl_coef=a.kl_coef,
                        entropy_coef=a.entropy_coef, loss_agg=a.loss_agg, value_clip=a.value_clip,
                        correction=correction_from_config(config), old_is_behaviour=old_logprobs_from_generator(config))
    return engine, loss


def flat_bf16_optimizer(s: TrainingEngineSettings) -> bool:
    """Whether a trained engine of these settings steps DeepSpeed's BF16_Optimizer (`deepspeed_config`), which
    skips a step whose gradient norm is NaN/inf itself."""
    return s.dtype == "bf16" and s.zero_stage <= 1


def deepspeed_config(s: TrainingEngineSettings, train: bool = True) -> dict[str, Any]:
    """The DeepSpeed config for an engine; `train=False` for a frozen model (no optimizer).

    A bf16 engine trained at ZeRO stage 0 or 1 runs stage 1 with fp32 gradient accumulation, which is what
    makes DeepSpeed build its BF16_Optimizer: the fp32 master weights, their gradients and Adam's moments
    each live in one flat tensor, stepped by torch's fused AdamW, so a step is a handful of kernels and one
    gradient norm whatever the parameter count. Stage 0 would build FP16_UnfusedOptimizer, which checks,
    copies and steps every parameter on its own, with a host sync each. At one rank stage 1 partitions
    nothing (docs/trainer.md).
    """
    stage = s.zero_stage
    flat_bf16 = train and flat_bf16_optimizer(s)
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "zero_optimization": {"stage": 1 if flat_bf16 else stage},
        "bf16": {"enabled": s.dtype == "bf16"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if flat_bf16:
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    if train:
        cfg["gradient_clipping"] = s.grad_clip
        cfg["optimizer"] = {"type": "AdamW", "params": {
            "lr": s.lr, "weight_decay": s.weight_decay, "betas": [0.9, 0.999], "eps": 1e-8, "torch_adam": True}}
        if flat_bf16:  # one kernel over the flat master tensor, its step count on the device (torch's fused AdamW)
            cfg["optimizer"]["params"]["fused"] = True
    return cfg


def lr_warmup_schedule(warmup_steps: int) -> Optional[Callable[[torch.optim.Optimizer], LambdaLR]]:
    """Linear warm-up: optimizer step t (from 0) uses lr * min(1, (t + 1) / warmup_steps).

    Not DeepSpeed's WarmupLR: its linear ramp starts at 0 and spends the first two steps at lr 0.
    DeepSpeed steps it after every optimizer step and saves it in its checkpoints.
    """
    if warmup_steps <= 0:
        return None
    return lambda optimizer: LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps))


def _load_hf(model_path: str, s: TrainingEngineSettings, ds_config: dict[str, Any], value_head: bool):
    """Load the HF model; under ZeRO-3 straight into partitions, never whole on one rank.

    transformers partitions at load while an HfDeepSpeedConfig object is alive (a process-wide weak
    reference). It lives only for this call, so later from_pretrained calls in the process (an HF
    generator, tests) load ordinary, whole models.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification
    from transformers.integrations import HfDeepSpeedConfig

    zero3_loading = HfDeepSpeedConfig(ds_config) if s.zero_stage == 3 else None  # noqa: F841
    torch.manual_seed(s.seed)
    if value_head:
        hf_config = AutoConfig.from_pretrained(model_path, num_labels=1)
        hf_config.classifier_dropout = 0.0
        model = AutoModelForTokenClassification.from_pretrained(model_path, config=hf_config, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.config.use_cache = False
    if s.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _device() -> torch.device:
    """This rank's device: the CPU here, cuda:LOCAL_RANK on GPUs."""
    return torch.device(deepspeed.get_accelerator().current_device_name())


class _MicroBatchedModel:
    """Shared by all engines: micro-batched forwards over samples, spread over ranks."""

    settings: TrainingEngineSettings
    info: RankInfo
    layout: Layout
    """The resolved layout (`_choose_layout`, called by every engine's constructor before its first forward)."""

    def _module(self) -> torch.nn.Module:
        raise NotImplementedError

    def _call(self, mb: MicroBatch) -> Tensor:
        raise NotImplementedError

    def _choose_layout(self, model: torch.nn.Module) -> None:
        """Resolve layout=auto: packing pays with a varlen kernel (flash-attention), which takes no dense
        mask; every other kernel runs the shared layout (one forward per distinct prompt)."""
        attention = str(getattr(model.config, "_attn_implementation", "") or "")
        if self.settings.layout == "shared" and "flash" in attention:
            raise ValueError("trainer.layout=shared needs an attention kernel that takes a dense mask (sdpa or "
                             f"eager), not {attention}; use trainer.layout=packed or auto")
        if self.settings.layout != "auto":
            self.layout = self.settings.layout
            return
        self.layout = "packed" if "flash" in attention else "shared"

    def _collate(self, samples: Sequence[TrainSample], indices: list[int], dummy: bool) -> MicroBatch:
        """Lay out on the CPU, then move to this rank's accelerator (a no-op on CPU)."""
        dtype = next(self._module().parameters()).dtype  # the compute dtype, also of ZeRO-3 placeholders
        if dummy and not indices:  # this rank holds no samples: a one-token filler runs the same forward
            samples, indices = [filler_sample()], [0]
        return collate(samples, indices, dummy, self.layout).to(_device(), dtype)

    def _own_plan(self, samples: Sequence[TrainSample]) -> Plan:
        """This rank's micro-batches of its own samples (none when it holds none)."""
        if not samples:
            return []
        lengths = [len(s) for s in samples]
        prompts = [s.prompt_ids for s in samples] if self.layout == "shared" else None
        return plan_micro_batches(lengths, self.settings.micro_token_budget, 1, self.layout, prompts)[0]

    def _plan(self, samples: Sequence[TrainSample]) -> Plan:
        """This rank's micro-batches, padded with dummies to the largest count over ranks (one collective)."""
        plan = self._own_plan(samples)
        (count,) = all_reduce_floats([len(plan)], op="max")
        return pad_plan(plan, int(count), [len(s) for s in samples])


class _PolicyForward(_MicroBatchedModel):
    logit_chunk_rows: int = LOGIT_CHUNK_ROWS
    """Kept positions per fp32 chunk of the log-softmax (losses.LOGIT_CHUNK_ROWS)."""

    def _call(self, mb: MicroBatch) -> Tensor:
        """(B * kept, V) raw logits, in the model's dtype, at the kept positions of every row."""
        with bf16_matmuls(self.settings.dtype):
            out = self._forward(input_ids=mb.input_ids, position_ids=mb.position_ids,
                                attention_mask=mb.attention_mask, logits_to_keep=mb.logits_to_keep, use_cache=False)
        return out.logits.reshape(-1, out.logits.shape[-1])

    def _forward(self, **kwargs):
        return self._module()(**kwargs)

    def _logp_entropy(self, mb: MicroBatch, with_entropy: bool) -> tuple[Tensor, Optional[Tensor]]:
        """(n, Rmax) log-probs of the response tokens (and entropies), from the kept positions only."""
        logits = self._call(mb)  # (B * kept, V)
        # one kept position may predict several samples' tokens (the shared layout's prompt end), and some
        # kept positions predict none (padding): each distinct position read (found at collate time) gets its
        # log-normaliser once, in chunks of fp32 rows both ways, so neither a (tokens x vocabulary) fp32
        # tensor nor more than one (kept x vocabulary) gradient is ever materialised (losses.py)
        logp, entropy = token_logp_entropy(logits, mb.kept_targets.reshape(-1), self.settings.temperature,
                                           with_entropy, chunk_rows=self.logit_chunk_rows,
                                           rows=mb.kept_index.reshape(-1), distinct=(mb.kept_used, mb.kept_slot))
        shape = mb.kept_index.shape
        return logp.view(shape), (entropy.view(shape) if with_entropy else None)

    @torch.no_grad()
    def compute_log_probs(self, samples: Sequence[TrainSample], with_entropy: bool = False
                          ) -> list[Tensor] | tuple[list[Tensor], list[Tensor]]:
        """Per-sample (R,) float32 log-probs of the response tokens (and their entropies)."""
        self._module().eval()  # no dropout (LoRA's) in scored log-probs; update() switches back to train
        logps: list[tuple[list[int], Tensor]] = []
        ents: list[tuple[list[int], Tensor]] = []
        for indices, dummy in self._plan(samples):
            mb = self._collate(samples, indices, dummy)
            logp, ent = self._logp_entropy(mb, with_entropy)
            if dummy:
                continue
            logps.append((indices, logp))
            if ent is not None:
                ents.append((indices, ent))
        # every micro-batch's results stay on the device until the pass ends, then go to the host in one copy
        lengths = [len(s.response_ids) for s in samples]
        by_sample = rows_to_host(logps, lengths)
        if with_entropy:
            entropies = rows_to_host(ents, lengths)
            return [by_sample[i] for i in range(len(samples))], [entropies[i] for i in range(len(samples))]
        return [by_sample[i] for i in range(len(samples))]


def check_finite(samples: Sequence[TrainSample]) -> None:
    """Reject NaN/inf advantages, log-probs, returns or values, naming the sample and field."""
    for i, sample in enumerate(samples):
        for name in ("advantage", "logp_old", "logp_ref", "returns", "values_old", "action_mask"):
            value = getattr(sample, name)
            if value is None:
                continue
            ok = math.isfinite(value) if isinstance(value, (int, float)) else bool(torch.isfinite(value).all())
            if not ok:
                raise NonFiniteError(f"sample {i} has a NaN/inf {name}; fix it before update()")


ACTION_SUM = "action_sum/"
GRAD_NORM = "grad_norm/step"
"""update()'s keys (+ step number) for its steps' grad norms among the device values it reads once."""


def action_sums(action: Tensor, logp: Tensor, logp_old: Tensor, logp_ref: Optional[Tensor], entropy: Tensor,
                clipped: Tensor) -> dict[str, Tensor]:
    """Sums over the action tokens of a micro-batch (see gigpo.trainer.action_tokens), as 0-dim device
    tensors; `action_means` turns an update's sums into per-action-token means, whatever the mini-batch split."""
    sums = {"tokens": action.sum(), "clip_frac": (clipped * action).sum(), "entropy": (entropy * action).sum(),
            "approx_kl_old": ((logp_old - logp) * action).sum()}
    if logp_ref is not None:
        sums["kl"] = (kl_k3(logp, logp_ref) * action).sum()
    return {ACTION_SUM + key: value for key, value in sums.items()}


def read_once(sums: dict[str, Tensor]) -> dict[str, float]:
    """0-dim device tensors as Python floats, in one copy to the host (one wait for the device, not one each)."""
    if not sums:
        return {}
    values = torch.stack([v.reshape(()) for v in sums.values()]).to("cpu", copy=True).tolist()
    return dict(zip(sums, values))


def action_means(totals: dict[str, float]) -> dict[str, float]:
    """`loss/action_*`: the update's clip fraction, entropy and KLs over action tokens alone."""
    count = totals.get(ACTION_SUM + "tokens", 0.0)
    if count <= 0:
        return {}
    return {"loss/action_" + key[len(ACTION_SUM):]: value / count for key, value in totals.items()
            if key.startswith(ACTION_SUM) and key != ACTION_SUM + "tokens"}


def minibatches(prompts: Sequence[Sequence[int]], size: Optional[int], epochs: int, seed: int, by_prompt: bool,
                count: Optional[int] = None, parts: Optional[int] = None) -> Iterator[list[int]]:
    """Shuffled mini-batches of sample indices (the same for the same seed and samples).

    `count` cuts each epoch into that many mini-batches of (nearly) equal size (fewer when there are
    fewer samples), so the optimizer steps per iteration do not grow with episode length; without it,
    mini-batches hold `size` samples. `parts` cuts each epoch into exactly that many, empty ones included:
    one rank's parts of mini-batches that every rank's samples make together.

    `by_prompt` shuffles whole sets of samples with identical prompts instead of single samples, then
    cuts the order into mini-batches of `size`: a prompt's samples land together (at most split across
    two mini-batches), so the shared layout computes each prompt once per mini-batch. Every sample is
    still used once per epoch and the mini-batches still partition a random order.
    """
    rng = random.Random(seed)
    units: list[list[int]] = []
    if by_prompt:
        members: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompts):
            members.setdefault(tuple(p), []).append(i)
        units = list(members.values())
    else:
        units = [[i] for i in range(len(prompts))]
    for _ in range(epochs):
        rng.shuffle(units)
        order = [i for unit in units for i in unit]
        if parts is not None:
            bounds = [len(order) * k // parts for k in range(parts + 1)]
        elif count is None:
            if size is None:
                raise ValueError("minibatches() needs a mini-batch size or count")
            bounds = list(range(0, len(order), size)) + [len(order)]
        else:
            parts = min(count, len(order))
            bounds = [len(order) * k // parts for k in range(parts + 1)]
        for start, end in zip(bounds, bounds[1:]):
            yield order[start:end]


class _TrainedEngine(_MicroBatchedModel):
    """Holds a deepspeed engine with an optimizer; runs accumulation, clipping and the step."""

    engine: Any
    updates: int = 0
    """update() calls so far; seeds each call's shuffle, restored from checkpoints."""
    step_in_update: int = 0
    """Optimizer steps of this update() taken before the mini-batch in progress (0: the weights are its start)."""
    _value_head: bool = False

    def __init__(self, model_path: str, settings: TrainingEngineSettings, loss: LossSettings):
        self.settings, self.loss = settings, loss
        self.info = init_distributed()
        self.ds_config = deepspeed_config(settings)
        model = _load_hf(model_path, settings, self.ds_config, value_head=self._value_head)
        self._choose_layout(model)
        if settings.lora is not None:  # adapters (and a critic's head) are all the optimizer sees
            model = lora.wrap(model, settings.lora, value_head=self._value_head)
        self.engine, *_ = deepspeed.initialize(model=model, model_parameters=lora.trainable_parameters(model),
                                               config=self.ds_config, lr_scheduler=lr_warmup_schedule(settings.warmup_steps))
        if self.info.world_size == 1 and (self.ds_config["zero_optimization"]["stage"] == 0 or flat_bf16_optimizer(settings)):
            # DeepSpeed would flatten, all-reduce and copy back every gradient, alone. (Not the ZeRO optimizers
            # of fp32 stage 1 and of stages 2-3: their reduction also moves the gradients into their partitions.)
            self.engine.enable_backward_allreduce = False

    def _module(self) -> torch.nn.Module:
        return self.engine

    def _micro_loss(self, mb: MicroBatch, denominator: float) -> tuple[Tensor, dict[str, Tensor]]:
        """The micro-batch's loss and its logged parts, 0-dim detached tensors on the device: `update` sums
        them there and reads them once, so no micro-batch makes the host wait for the device."""
        raise NotImplementedError

    def _mini_batches(self, samples: Sequence[TrainSample]) -> list[list[int]]:
        """This rank's part of every mini-batch, in step order. One rank: `minibatches` as configured. Several:
        the count per epoch follows from every rank's samples together (mini_batches, or the sample count over
        mini_batch_size), and each rank cuts its own samples into that many parts, so every rank takes the same
        optimizer steps and mini-batch k is every rank's part k."""
        s = self.settings
        prompts, seed = [x.prompt_ids for x in samples], minibatch_seed(s.seed, self.updates)
        if self.info.world_size == 1:
            if not samples:
                raise ValueError("update() got no samples")
            return list(minibatches(prompts, s.mini_batch_size, s.ppo_epochs, seed, s.minibatch_by_prompt,
                                    s.mini_batches))
        (total,) = all_reduce_floats([len(samples)])
        if total == 0:
            raise ValueError("update() got no samples on any rank")
        if s.mini_batches is None and s.mini_batch_size is None:
            raise ValueError("minibatches() needs a mini-batch size or count")
        per_epoch = (min(s.mini_batches, int(total)) if s.mini_batches is not None
                     else math.ceil(total / s.mini_batch_size))
        return list(minibatches(prompts, None, s.ppo_epochs, seed, s.minibatch_by_prompt, parts=per_epoch))

    def update(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """Train on `samples` (this rank's; with several ranks every rank calls it with its own, possibly none):
        ppo_epochs x mini-batches, each one optimizer step on every rank's part of it together."""
        check_finite(samples)
        s, world = self.settings, self.info.world_size
        self.engine.train()
        subsets = [[samples[i] for i in mini] for mini in self._mini_batches(samples)]
        plans = [self._own_plan(subset) for subset in subsets]
        # what the ranks agree on before the first step: each mini-batch's loss denominator (its tokens or
        # samples on every rank together) and its micro-batch count (the largest; the others pad with dummies)
        own = [float(sum(len(x.response_ids) for x in subset) if self._loss_agg() == "token-mean" else len(subset))
               for subset in subsets]
        denominators = all_reduce_floats(own)
        micro_counts = all_reduce_floats([len(plan) for plan in plans], op="max")
        sums: dict[str, Tensor] = {}  # fp64 on the device, in micro-batch order: the sums of the parts' floats
        norms: list[Tensor] = []  # each step's grad norm as DeepSpeed computed it, read with the sums at the end
        steps, micro, packed, real, budget_used = 0, 0, 0, 0, 0
        for subset, plan, denominator, count in zip(subsets, plans, denominators, micro_counts):
            if denominator == 0:  # no rank holds a sample of this mini-batch: every rank skips it alike
                continue
            self.step_in_update = steps
            finite_losses: Optional[Tensor] = None
            for indices, dummy in pad_plan(plan, int(count), [len(x) for x in subset]):
                mb = self._collate(subset, indices, dummy)
                loss, parts = self._micro_loss(mb, denominator)
                # DeepSpeed averages gradients over ranks; each rank's loss is its samples' share of the
                # mini-batch's sum over every rank (the global denominator), so world x it sums to the whole.
                with bf16_matmuls(s.dtype):
                    self.engine.backward(loss * (0.0 if dummy else float(world)))
                micro += 1
                finite_loss = torch.isfinite(loss.detach())
                finite_losses = finite_loss if finite_losses is None else finite_losses & finite_loss
                if not dummy:
                    packed += mb.num_tokens
                    real += mb.num_real_tokens
                    budget_used += s.micro_token_budget
                    for key, value in parts.items():
                        value = value.detach().double()
                        sums[key] = sums[key] + value if key in sums else value
            finite = finite_losses is None or bool(finite_losses)  # one read per optimizer step
            if any_rank(not finite):  # every rank decides together, before the step touches the weights
                raise NonFiniteError(f"{self._prefix} loss is NaN/inf in optimizer step {steps + 1} of this update; "
                                     "the step was not applied, so the weights are those before it")
            own_norm = None
            if self.ds_config["zero_optimization"]["stage"] == 0:
                # fp32 at ZeRO-0 (bf16 runs stage 1: deepspeed_config): DeepSpeed reports no grad norm and skips
                # no step here, so the norm is taken here, and the step only when it is finite
                grads = [p.grad for p in self._module().parameters() if p.grad is not None]
                own_norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
                if any_rank(not math.isfinite(own_norm)):
                    raise NonFiniteError(f"{self._prefix} gradients are NaN/inf (norm {own_norm}) in optimizer step "
                                         f"{steps + 1} of this update; the step was not applied")
            lr = float(self.engine.get_lr()[0])  # what this step uses; the scheduler moves it after
            self.engine.step()
            steps += 1
            norm = self.engine.get_global_grad_norm()  # the one DeepSpeed clipped with (None at ZeRO-0)
            if norm is None:
                norm = own_norm
            # BF16_Optimizer's norm is a device tensor, finite when the step was applied: it stays there until the
            # update ends (reading it now would wait for the step's kernels). The other optimizers' are checked here.
            checked = flat_bf16_optimizer(s) or norm is None or math.isfinite(float(norm))
            if not self.engine.was_step_applied() or not checked:
                # ZeRO 1-3 and bf16 skip a step whose gradients overflow; plain ZeRO-0 fp32 would not
                raise NonFiniteError(f"{self._prefix} gradients are NaN/inf in optimizer step {steps} of this update "
                                     f"(grad norm {norm}); DeepSpeed skipped the step")
            if norm is not None:
                norms.append(torch.as_tensor(norm, dtype=torch.float64, device=_device()).reshape(()))
        self.updates += 1
        local = read_once({**sums, **{f"{GRAD_NORM}{k}": norm for k, norm in enumerate(norms)}})
        grad_norms = [local.pop(f"{GRAD_NORM}{k}") for k in range(len(norms))]  # alike on every rank: not summed
        totals: dict[str, float] = defaultdict(float)
        for part in all_gather_objects(local):
            for key, value in part.items():
                totals[key] += value
        metrics = {key: value / steps for key, value in totals.items()  # mean over optimizer steps
                   if not key.startswith((ACTION_SUM, CORRECTION_SUM))}
        metrics.update(action_means(totals))
        metrics.update(correction_means(totals))
        counts = all_gather_objects((micro, packed, budget_used, real))
        metrics.update({
            f"{self._prefix}/grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else float("nan"),
            f"{self._prefix}/lr": lr,
            f"{self._prefix}/optimizer_steps": float(steps),
            "perf/micro_batches": float(sum(c[0] for c in counts)),
            "perf/pad_share": 1.0 - sum(c[3] for c in counts) / max(1, sum(c[1] for c in counts)),
            "perf/budget_fill": sum(c[1] for c in counts) / max(1, sum(c[2] for c in counts)),
        })
        return metrics

    _prefix = "actor"

    def _loss_agg(self) -> str:
        raise NotImplementedError

    def save_state(self, directory: str, tag: str) -> None:
        """DeepSpeed checkpoint (weights, optimizer, scheduler) under directory/tag; all ranks call."""
        # with LoRA the frozen base is the model the run started from: only adapters are saved
        self.engine.save_checkpoint(directory, tag=tag, client_state={"updates": self.updates}, save_latest=False,
                                    exclude_frozen_parameters=self.settings.lora is not None)

    def load_state(self, directory: str, tag: str) -> None:
        saved = Path(directory) / tag
        flat = saved / f"bf16_zero_pp_rank_{self.info.rank}_mp_rank_00_optim_states.pt"
        if flat_bf16_optimizer(self.settings) and (saved / "mp_rank_00_model_states.pt").is_file() and not flat.is_file():
            raise ValueError(
                f"{saved} holds a bf16 optimizer without its flat fp32 state ({flat.name}): it was written at ZeRO "
                "stage 0 before bf16 engines moved to DeepSpeed's BF16_Optimizer (docs/trainer.md, the optimizer "
                "step), whose Adam state it cannot restore. Resume it with the gigpo version that wrote it, or "
                "start a new run from its weights with model.path=<that checkpoint>/hf (Adam's moments restart)")
        _, client = self.engine.load_checkpoint(directory, tag=tag, load_optimizer_states=True,
                                                load_lr_scheduler_states=True,
                                                load_module_strict=self.settings.lora is None)
        if client is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} under {directory}")
        self.updates = int(client.get("updates", 0))


class ActorEngine(_TrainedEngine, _PolicyForward):
    """The policy: log-probs for old/ref computations and PPO-clip updates, weights for the generator."""

    _prefix = "actor"

    def _loss_agg(self) -> str:
        return self.loss.loss_agg

    def _micro_loss(self, mb: MicroBatch, denominator: float) -> tuple[Tensor, dict[str, Tensor]]:
        L = self.loss
        if "logp_old" not in mb.fields:
            raise ValueError("every TrainSample needs logp_old for update(): compute them with "
                             "actor.compute_log_probs(samples) before the first mini-batch step")
        logp, entropy = self._logp_entropy(mb, with_entropy=True)
        mask, agg = mb.mask, L.loss_agg
        correction: dict[str, Tensor] = {}
        if L.correction is not None:  # the generator/trainer mismatch (gigpo.trainer.rollout_correction)
            if "logp_behaviour" not in mb.fields:
                raise ValueError("algorithm.rollout_correction needs logp_behaviour (the generator's log-probs) on "
                                 "every TrainSample: RolloutPipeline.correct(samples, ...) attaches them")
            pg, clipped, correction = corrected_policy_loss(
                logp, mb.fields["logp_old"], mb.fields["logp_behaviour"], mb.fields["advantage"], mask,
                L.clip_low, L.clip_high, L.correction, L.old_is_behaviour)
            if L.old_is_behaviour and self.step_in_update > 0:  # the live policy has moved: its gap to the
                correction = {}  # generator is no longer the mismatch, so only the first mini-batch is measured
        else:
            pg, clipped = policy_loss(logp, mb.fields["logp_old"], mb.fields["advantage"], L.clip_low, L.clip_high)
        pg_loss = aggregate(pg, mask, agg, denominator)
        ent = aggregate(entropy, mask, agg, denominator)
        # entropy is always logged; only a non-zero coefficient puts it in the graph (its backward is not free)
        loss = pg_loss - L.entropy_coef * ent if L.entropy_coef else pg_loss
        parts = {"loss/policy": pg_loss.detach(), "loss/entropy": ent.detach(),
                 "loss/clip_frac": aggregate(clipped, mask, agg, denominator),
                 "loss/approx_kl_old": aggregate(mb.fields["logp_old"] - logp.detach(), mask, agg, denominator)}
        if L.kl_coef > 0:
            if "logp_ref" not in mb.fields:
                raise ValueError(f"algorithm.kl_coef={L.kl_coef} needs logp_ref on every TrainSample: compute "
                                 "them with reference.compute_log_probs(samples), or set algorithm.kl_coef=0")
            kl = aggregate(kl_k3(logp, mb.fields["logp_ref"]), mask, agg, denominator)
            loss = loss + L.kl_coef * kl
            parts["loss/kl"] = kl.detach()
        parts["loss/total"] = loss.detach()
        parts.update(correction)
        if "action_mask" in mb.fields:
            parts.update(action_sums(mb.fields["action_mask"] * mask, logp.detach(), mb.fields["logp_old"],
                                     mb.fields.get("logp_ref"), entropy.detach(), clipped))
        return loss, parts

    def named_weights(self, include_tied: bool = True, on_device: bool = False) -> Iterator[tuple[str, Tensor]]:
        """Every full weight as (HF name, CPU tensor), for the generator's weight sync or saving.

        All ranks must iterate together under ZeRO-3: each module's parameters are gathered (one
        module at a time, so never more than one layer's worth at once), copied out and released.
        With tied embeddings `lm_head.weight` is also yielded (vLLM's CPU LM head keeps its own copy).
        `on_device`: the gathered tensors themselves, on the rank's device, no copy (for an engine in
        this process, which must take each before the next is asked for); LoRA still merges, on the device.
        """
        module = self.engine.module
        zero3 = self.settings.zero_stage == 3
        if self.settings.lora is not None:  # W + B @ A * scale under the base model's names
            yield from lora.merged_weights(module, zero3, on_device)
        else:
            yield from _iter_full_weights(module, zero3, on_device)
        config = getattr(module, "config", None)
        if include_tied and getattr(config, "tie_word_embeddings", False):
            embed = module.get_input_embeddings().weight
            with _gathered([embed], zero3):
                yield "lm_head.weight", embed.detach() if on_device else embed.detach().to("cpu", copy=True)

    def hf_module(self) -> torch.nn.Module:
        """The underlying transformers model (its config and save_pretrained); with LoRA its PeftModel,
        whose forward applies the adapters."""
        return self.engine.module


class _gathered:
    """`deepspeed.zero.GatheredParameters` under ZeRO-3, nothing otherwise."""

    def __init__(self, params: list[Tensor], zero3: bool):
        self.ctx = deepspeed.zero.GatheredParameters(params, modifier_rank=None) if zero3 else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)
        return False


def _iter_full_weights(module: torch.nn.Module, zero3: bool, on_device: bool = False) -> Iterator[tuple[str, Tensor]]:
    """named_parameters() order and names (a tied weight once), gathered one module at a time; CPU
    copies, or with `on_device` the gathered tensors themselves."""
    seen: set[int] = set()
    for prefix, sub in module.named_modules():
        params = [(n, p) for n, p in sub.named_parameters(recurse=False) if id(p) not in seen]
        seen.update(id(p) for _, p in params)
        if not params:
            continue
        with _gathered([p for _, p in params], zero3):
            for name, p in params:
                yield (f"{prefix}.{name}" if prefix else name), p.detach() if on_device else p.detach().to("cpu", copy=True)


class ReferenceModel(_PolicyForward):
    """Frozen copy of the initial policy for the KL term: no optimizer, no gradients.

    Under ZeRO-3 it is a DeepSpeed engine without optimizer, so its weights are partitioned like the
    actor's; otherwise a plain module in the training dtype.
    """

    def __init__(self, model_path: str, settings: TrainingEngineSettings):
        self.settings = settings
        self.info = init_distributed()
        self.ds_config = deepspeed_config(settings, train=False)
        model = _load_hf(model_path, settings, self.ds_config, value_head=False)
        self._choose_layout(model)
        model.requires_grad_(False)
        if settings.zero_stage == 3:  # loaded partitioned (HfDeepSpeedConfig): only an engine can run it
            self.module, *_ = deepspeed.initialize(model=model, config=self.ds_config)
        else:
            from gigpo.infra.dtypes import torch_dtype

            self.module = model.to(device=_device(), dtype=torch_dtype(settings.dtype))
        self.module.eval()

    def _module(self) -> torch.nn.Module:
        return self.module


class CriticEngine(_TrainedEngine):
    """PPO's value model: the policy's architecture with a scalar head per token, own optimizer.

    The value of response token j is read where the policy predicts it (the state before token j).
    """

    _prefix = "critic"
    _value_head = True

    def _loss_agg(self) -> str:
        return "token-mean"

    def _call(self, mb: MicroBatch) -> Tensor:
        with bf16_matmuls(self.settings.dtype):
            out = self.engine(input_ids=mb.input_ids, position_ids=mb.position_ids,
                              attention_mask=mb.attention_mask, use_cache=False)
        values = out.logits[..., 0].float().reshape(-1)  # (B * W,)
        return values[mb.predict_index]  # (n, Rmax)

    @torch.no_grad()
    def compute_values(self, samples: Sequence[TrainSample]) -> list[Tensor]:
        """Per-sample (R,) values of the states before each response token."""
        self.engine.eval()
        local: dict[int, Tensor] = {}
        for indices, dummy in self._plan(samples):
            mb = self._collate(samples, indices, dummy)
            values = self._call(mb)
            if not dummy:
                local.update(zip(indices, unpad(values, mb.mask)))
        return [local[i] for i in range(len(samples))]

    def _micro_loss(self, mb: MicroBatch, denominator: float) -> tuple[Tensor, dict[str, Tensor]]:
        if "returns" not in mb.fields:
            raise ValueError("every TrainSample needs returns for critic.update()")
        values = self._call(mb)
        old = mb.fields.get("values_old")
        clip = self.loss.value_clip if old is not None else None
        per_token = value_loss(values, old if old is not None else values.detach(), mb.fields["returns"], clip)
        loss = aggregate(per_token, mb.mask, "token-mean", denominator)
        return loss, {"critic/value_loss": loss.detach()}
