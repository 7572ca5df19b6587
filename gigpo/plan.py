"""`gigpo plan RECIPE [k=v ...]`: what one run needs per rank before anything loads, and the check
`gigpo train` makes with it.

Why: the common failure of agentic RL runs is running out of GPU memory, host RAM or CPU cores for
env workers before the first step. Everything here is arithmetic on the model's shape (read from its
config.json, or a table of known shapes for hub ids that are not on disk) and the recipe's settings;
no weights are loaded. The byte counts per parameter follow what DeepSpeed holds (docs/trainer.md,
docs/benchmarks.md "Memory"): bf16 weights, fp32 gradients, fp32 master weights and two AdamW moments,
each divided over the ranks by the ZeRO stage that partitions it. Activations are an estimate at the
micro-token budget; docs/trainer.md states how far the total is from measured peaks.

On GPUs every rank is colocated: it holds its DeepSpeed shard and its own vLLM engine (a 1/TP shard of
one with rollout.tensor_parallel_size), and the run moves between two memory phases
(gigpo/trainer/memory_phases.py): generation (training state resident, vLLM awake) and update (training
state, activations, and what vLLM keeps while asleep). A rank's peak is its larger phase, not the sum.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional


GIB = 2**30
PROCESS_BASE_GIB = 0.5
"""Host RSS of a rank after importing torch, transformers and DeepSpeed (measured here: 0.49 GiB)."""
VLLM_ENGINE_HOST_GIB = 2.0
"""Host RAM of a vLLM engine's processes beyond its weights and KV cache (API process, engine core)."""
VLLM_GPU_OVERHEAD_GIB = 2.0
"""GPU memory vLLM reserves inside its share besides weights and KV cache (CUDA graphs, sampler peak)."""
CUDA_CONTEXT_GIB = 0.6
"""GPU memory a process's CUDA context and kernels take before any tensor."""
VLLM_ASLEEP_GIB = 2.0
"""GPU memory a sleeping vLLM engine keeps (what sleep mode does not unmap: CUDA graphs' pool, the
sampler's buffers); an estimate, not measured: taken as its whole overhead."""
ZERO3_LIVE_PARAMS = 1e9
"""DeepSpeed's stage3_max_live_parameters default: parameters ZeRO-3 may hold gathered at once."""
ALLOCATOR_MARGIN = 0.08
"""Added to the training state and activations: transient tensors the plan does not list (optimizer-step
temporaries, allocator rounding). Calibrated on the only GPU measurements (docs/gpu.md, base05b on an H200,
ZeRO 0 and 3): with it the plan is 4-5% above them, without it 3-4% below."""
ENV_WORKER_GIB = {"alfworld": 0.4, "webshop": 0.4, "default": 0.15}
"""Host RSS per env worker process, by env family. WebShop's is measured (a 100k-product index: ~0.33 GiB,
docs/benchmarks.md); ALFWorld's (TextWorld's PDDL engine) and the default are rough guesses, not measured."""
LOGIT_CHUNK_ROWS = 256  # gigpo.trainer.losses.LOGIT_CHUNK_ROWS (not imported: it would import torch)


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a decoder-only transformer (Qwen2 / Llama family)."""
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer in one decoder layer (what LoRA's all-linear adapts)."""
        h, kv, i = self.hidden_size, self.kv_dim, self.intermediate_size
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    @property
    def params(self) -> int:
        h, v = self.hidden_size, self.vocab_size
        per_layer = sum(a * b for a, b in self.linear_shapes()) + 2 * h
        if self.qkv_bias:
            per_layer += h + 2 * self.kv_dim
        return v * h * (1 if self.tie_word_embeddings else 2) + self.num_hidden_layers * per_layer + h

    def lora_params(self, rank: int) -> int:
        return self.num_hidden_layers * sum(rank * (a + b) for a, b in self.linear_shapes())


def _qwen(v: int, h: int, layers: int, heads: int, kv: int, i: int, tied: bool) -> Shape:
    return Shape(v, h, layers, heads, kv, i, tied)


KNOWN_SHAPES: dict[str, Shape] = {
    # Published config.json values of the models the recipes name (instruct and base share shapes).
    "Qwen/Qwen2.5-0.5B-Instruct": _qwen(151936, 896, 24, 14, 2, 4864, True),
    "Qwen/Qwen2.5-1.5B-Instruct": _qwen(151936, 1536, 28, 12, 2, 8960, True),
    "Qwen/Qwen2.5-3B-Instruct": _qwen(151936, 2048, 36, 16, 2, 11008, True),
    "Qwen/Qwen2.5-7B-Instruct": _qwen(152064, 3584, 28, 28, 4, 18944, False),
    "Qwen/Qwen2.5-14B-Instruct": _qwen(152064, 5120, 48, 40, 8, 13824, False),
    "Qwen/Qwen2.5-32B-Instruct": _qwen(152064, 5120, 64, 40, 8, 27648, False),
    "smollm2-135m-instruct": Shape(49152, 576, 30, 9, 3, 1536, True, qkv_bias=False),
}


class PlanError(ValueError):
    """A model whose shape cannot be found, or a launch that cannot fit."""


def shape_from_config(config: dict[str, Any]) -> Shape:
    try:
        return Shape(int(config["vocab_size"]), int(config["hidden_size"]), int(config["num_hidden_layers"]),
                     int(config["num_attention_heads"]),
                     int(config.get("num_key_value_heads") or config["num_attention_heads"]),
                     int(config["intermediate_size"]), bool(config.get("tie_word_embeddings", False)),
                     qkv_bias=config.get("model_type", "qwen2") == "qwen2" or bool(config.get("attention_bias")))
    except KeyError as exc:
        raise PlanError(f"config.json lacks {exc.args[0]!r}: gigpo plan reads decoder-only (Qwen2/Llama) configs") from exc


def model_shape(model: Any) -> tuple[Shape, str]:
    """The shape of the recipe's model and where it came from, without loading any weight."""
    if model.init:
        from gigpo.models.local import PRESETS

        if model.init not in PRESETS:
            raise PlanError(f"model.init={model.init!r} is no preset; choose one of {', '.join(PRESETS)}")
        p = PRESETS[model.init]
        return Shape(p.vocab_size, p.hidden_size, p.num_hidden_layers, p.num_attention_heads, p.num_key_value_heads,
                     p.intermediate_size, p.tie_word_embeddings), f"local preset {model.init}"
    path = model.path
    for candidate in _config_candidates(path):
        if candidate.is_file():
            return shape_from_config(json.loads(candidate.read_text())), str(candidate)
    if path in KNOWN_SHAPES:
        return KNOWN_SHAPES[path], f"gigpo's table of known shapes ({path} is not on disk)"
    raise PlanError(f"model.path={path!r}: no config.json on disk (a directory, the Hugging Face cache, or a pinned "
                    f"model's cache) and not among the known shapes ({', '.join(KNOWN_SHAPES)}); download it first "
                    "(huggingface-cli download ID config.json) or point model.path at a directory")


def _config_candidates(path: str) -> list[Path]:
    out = [Path(path) / "config.json"]
    from gigpo.models.pretrained import PINNED, pinned_model_dir

    if path in PINNED:
        out.append(pinned_model_dir(path) / "config.json")
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            out.append(Path(cached))
    except Exception:  # not a repo id (a missing directory), or no hub library: the table decides
        pass
    return out


@dataclass
class Plan:
    """Per-rank needs in bytes; `gpu` is empty when the run trains on CPUs."""
    shape: Shape
    source: str
    nprocs: int
    on_gpu: bool
    trainer: dict[str, float]
    """Training memory of every rank, by part (weights, gradients, optimizer, reference, critic, activations)."""
    generator: dict[str, float]
    """Rank 0's generator: its weights, KV cache and overhead (on rank 0's GPU, or in host RAM on CPU)."""
    host_rank: float
    host_rank0_extra: float
    env_workers: int
    env_worker_gib: float
    vllm_share_of: Optional[float] = None
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    """GPU: each memory phase's parts on one rank ("generation", "update"); empty on CPU."""

    @property
    def trainer_bytes(self) -> float:
        return sum(self.trainer.values())

    @property
    def generator_bytes(self) -> float:
        return sum(self.generator.values())

    def peak_phase(self) -> tuple[str, float]:
        """The phase whose parts weigh most on one rank's GPU, and its bytes."""
        return max(((name, sum(parts.values())) for name, parts in self.phases.items()), key=lambda p: p[1])

    def rank0_device_bytes(self) -> float:
        """What one rank's device must hold at its peak: its larger phase on a GPU, the trainer and the
        generator in host RAM on CPU."""
        if self.on_gpu:
            return self.peak_phase()[1]
        return self.trainer_bytes + self.generator_bytes

    def host_total(self) -> float:
        return self.nprocs * self.host_rank + self.host_rank0_extra


def plan_for(config: Any, on_gpu: Optional[bool] = None, gpu_gib: Optional[float] = None) -> Plan:
    """Estimate the needs of `config` (a gigpo Config). `on_gpu`: plan for GPUs (default: whether CUDA is
    visible, or the model is too large for a CPU run to be meant); `gpu_gib`: one GPU's memory (vLLM's
    share is gpu_memory_utilization of it)."""
    shape, source = model_shape(config.model)
    t, r, m, a, e = config.trainer, config.rollout, config.model, config.algorithm, config.env
    if on_gpu is None:
        on_gpu = _cuda_visible() or shape.params > 2e9
    n, z = t.nprocs, t.zero_stage
    wbytes = 2 if m.dtype == "bf16" else 4
    p = shape.params
    lora = m.lora.enabled
    trainable = shape.lora_params(m.lora.rank) if lora else p
    optimizer_bytes = (12 if m.dtype == "bf16" else 8) * trainable  # fp32 master (bf16 only) + 2 AdamW moments

    # gradients: fp32 accumulators, plus the bf16 .grad DeepSpeed's bf16 optimizers reduce from
    trainer = {
        "weights": p * wbytes / (n if z == 3 else 1),
        "gradients": (4 + (2 if wbytes == 2 else 0)) * trainable / (n if z >= 2 else 1),
        # bf16 at ZeRO-0 trains at stage 1 (gigpo.trainer.engines.deepspeed_config: DeepSpeed's flat BF16_Optimizer)
        "optimizer": optimizer_bytes / (n if z >= 1 or m.dtype == "bf16" else 1),
    }
    if z == 3:  # layers gathered whole for the forward/backward, up to DeepSpeed's live-parameter cap
        trainer["ZeRO-3 gathered"] = min(p, ZERO3_LIVE_PARAMS) * wbytes
    if a.kl_coef > 0 and not lora:  # LoRA's reference is the actor with adapters off
        trainer["reference"] = p * wbytes / (n if z == 3 else 1)
    if a.estimator == "ppo":
        body = p - shape.vocab_size * shape.hidden_size * (0 if shape.tie_word_embeddings else 1)
        trainer["critic"] = body * (wbytes + 4 + optimizer_bytes / trainable) / (n if z == 3 else 1)
    trainer["activations"] = activation_bytes(shape, t.micro_token_budget, wbytes, m.gradient_checkpointing,
                                              r.max_new_tokens / (r.max_new_tokens + r.max_prompt_tokens))
    trainer["allocator margin"] = ALLOCATOR_MARGIN * sum(trainer.values())

    generator = generator_bytes(config, shape, wbytes, on_gpu, gpu_gib)
    # Every rank plays its share of the rollout with its own generator and env workers.
    env_workers = config.env_workers_per_rank()
    family = next((k for k in ENV_WORKER_GIB if k in e.id.lower()), "default")
    host_rank = PROCESS_BASE_GIB * GIB + env_workers * ENV_WORKER_GIB[family] * GIB
    host_rank += VLLM_ENGINE_HOST_GIB * GIB if r.backend != "hf" else 0
    sleeping = on_gpu and r.backend == "vllm" and r.mode == "sync" and r.sleep_level > 0
    if on_gpu:
        # loading: each rank reads its weights through host memory once (transformers' loader)
        host_rank += p * wbytes / (n if z == 3 else 1)
        if sleeping and r.sleep_level == 1:  # level 1 parks the engine's weights in host RAM during the update
            host_rank += generator["vLLM weights"]
        if t.offload_reference and "reference" in trainer:
            host_rank += trainer["reference"]
        host_rank0_extra = p * wbytes  # rank 0 gathers the whole model to save a checkpoint
    else:
        host_rank += sum(trainer.values()) + sum(generator.values())
        host_rank0_extra = 0.0
    share = r.gpu_memory_utilization if on_gpu and r.backend != "hf" else None
    phases = memory_phases(config, trainer, generator, sleeping) if on_gpu else {}
    return Plan(shape, source, n, on_gpu, trainer, generator if on_gpu else {}, host_rank, host_rank0_extra,
                env_workers, ENV_WORKER_GIB[family], share, phases)


def memory_phases(config: Any, trainer: dict[str, float], generator: dict[str, float],
                  sleeping: bool) -> dict[str, dict[str, float]]:
    """One rank's GPU in each phase of the colocated timeline (gigpo/trainer/memory_phases.py).

    generation: the training state stays resident (its activations' cached blocks were emptied), the
    engine is awake, the reference is in host RAM with trainer.offload_reference. update: the training
    state with activations, and the sleeping engine's remainder; an engine that does not sleep (sleep
    level 0, hf, vllm-server, async mode where it generates during the update) stays whole in both."""
    t = config.trainer
    resident = {k: v for k, v in trainer.items() if k not in ("activations", "allocator margin")}
    margin = lambda parts: {"allocator margin": ALLOCATOR_MARGIN * sum(parts.values())}  # noqa: E731
    context = {"CUDA context": CUDA_CONTEXT_GIB * GIB}
    in_generation = {k: v for k, v in resident.items()
                     if not (k == "reference" and t.offload_reference) and k != "ZeRO-3 gathered"}
    in_update = {**resident, "activations": trainer["activations"]}
    engine_asleep = {"vLLM asleep": VLLM_ASLEEP_GIB * GIB} if sleeping else dict(generator)
    if config.rollout.mode == "async":  # the engine generates while the update runs: both at once
        in_generation = in_update
    return {"generation": {**context, **in_generation, **margin(in_generation), **generator},
            "update": {**context, **in_update, **margin(in_update), **engine_asleep}}


def activation_bytes(shape: Shape, tokens: int, wbytes: int, checkpointing: bool, response_share: float) -> float:
    """Autograd's saved tensors for one micro-batch of `tokens`, plus the response positions' logits.

    Per token and layer a decoder layer keeps about its input, the attention's q, k, v and output, and
    the MLP's four intermediate tensors; with checkpointing only each layer's input stays and one layer
    is recomputed at a time. Logits exist only at response positions (`logits_to_keep`), in the model's
    dtype, with their gradient; the log-softmax runs in fp32 chunks of LOGIT_CHUNK_ROWS rows.
    """
    h, i = shape.hidden_size, shape.intermediate_size
    full_layer = tokens * (6 * h + 2 * shape.kv_dim + 4 * i) * wbytes
    kept = shape.num_hidden_layers * (tokens * h * wbytes if checkpointing else full_layer)
    if checkpointing:
        kept += full_layer
    responses = tokens * response_share
    logits = 2 * responses * shape.vocab_size * wbytes + 3 * LOGIT_CHUNK_ROWS * shape.vocab_size * 4
    return kept + logits


def generator_bytes(config: Any, shape: Shape, wbytes: int, on_gpu: bool, gpu_gib: Optional[float]) -> dict[str, float]:
    """One rank's generator. vLLM on a GPU takes gpu_memory_utilization of it: its weights (a 1/TP shard
    with rollout.tensor_parallel_size), overhead, and the KV cache in what is left; on CPU its KV cache is
    rollout.kv_cache_gb of host RAM."""
    r = config.rollout
    weights = shape.params * wbytes
    if r.backend == "hf":
        return {"generator weights": weights, "generator prompt cache": r.kv_cache_gb * GIB}
    if not on_gpu:
        return {"vLLM weights": weights, "vLLM KV cache": r.kv_cache_gb * GIB}
    weights /= r.tensor_parallel_size  # each rank of a tensor-parallel engine holds its shard
    share = r.gpu_memory_utilization * (gpu_gib or device_gib() or 80.0) * GIB
    return {"vLLM weights": weights, "vLLM overhead": VLLM_GPU_OVERHEAD_GIB * GIB,
            "vLLM KV cache": max(0.0, share - weights - VLLM_GPU_OVERHEAD_GIB * GIB)}


def kv_bytes_per_token(shape: Shape, wbytes: int) -> int:
    return 2 * shape.num_hidden_layers * shape.kv_dim * wbytes


def _cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def device_gib() -> Optional[float]:
    """This machine's GPU memory (total), or None without CUDA."""
    if not _cuda_visible():
        return None
    import torch

    return torch.cuda.mem_get_info()[1] / GIB


def available_gib(on_gpu: bool) -> Optional[float]:
    """Free memory of the device the rank would use: the current GPU's, or host RAM available."""
    if on_gpu:
        if not _cuda_visible():
            return None
        import torch

        return torch.cuda.mem_get_info()[0] / GIB
    import psutil

    return psutil.virtual_memory().available / GIB


def biggest_lever(plan: Plan, config: Any) -> str:
    """The setting whose change frees the most on rank 0, named with what to set it to."""
    t, r, m = config.trainer, config.rollout, config.model
    tr = plan.trainer
    options: list[tuple[float, str]] = []
    if plan.on_gpu and r.backend != "hf":
        share = sum(plan.generator.values())
        options.append((min(plan.generator.get("vLLM KV cache", 0.0), share / 2),
                        f"rollout.gpu_memory_utilization (now {r.gpu_memory_utilization}; e.g. "
                        f"{max(0.1, round(r.gpu_memory_utilization / 2, 2))})"))
    n, z = t.nprocs, t.zero_stage
    min_stage = {"weights": 3, "reference": 3, "critic": 3, "gradients": 2, "optimizer": 0 if m.dtype == "bf16" else 1}
    whole = sum(v * (n if z >= min_stage[k] else 1) for k, v in tr.items() if k in min_stage)
    states_now = sum(v for k, v in tr.items() if k in min_stage)
    if z < 3 and n > 1:
        options.append((states_now - whole / n, f"trainer.zero_stage (now {z}; set 3)"))
    options.append((whole / n / 2, f"trainer.nprocs (now {n}; e.g. {2 * n}, with trainer.zero_stage=3)"))
    if not m.gradient_checkpointing:
        options.append((tr["activations"] * 0.7, "model.gradient_checkpointing (now false; set true)"))
    options.append((tr["activations"] * 0.5, f"trainer.micro_token_budget (now {t.micro_token_budget}; e.g. "
                                             f"{max(1024, t.micro_token_budget // 2)})"))
    if not m.lora.enabled:
        options.append((tr["optimizer"] + tr["gradients"], "model.lora.enabled (now false; set true)"))
    return max(options)[1]


def check_fits(config: Any) -> Optional[Plan]:
    """What `gigpo train` calls before any model loads: raise PlanError when a rank's peak phase cannot fit
    in the free memory of this machine's device (GPU when CUDA is visible, host RAM otherwise). Returns the plan,
    or None when the shape is unknown (the launch goes on: the plan is advice, not a gate, there).
    GIGPO_PLAN_CHECK=0 skips the check."""
    if os.environ.get("GIGPO_PLAN_CHECK", "1") == "0":
        return None
    try:
        plan = plan_for(config, on_gpu=_cuda_visible())
    except PlanError:
        return None
    free = available_gib(plan.on_gpu)
    if free is None:
        return plan
    need = (plan.rank0_device_bytes() if plan.on_gpu else plan.host_total()) / GIB
    if need > free:
        where = f"GPU memory per rank (its {plan.peak_phase()[0]} phase)" if plan.on_gpu else "host RAM"
        raise PlanError(f"this launch needs about {need:.1f} GiB of {where}, and {free:.1f} GiB is free: it cannot "
                        f"fit. The biggest saving: {biggest_lever(plan, config)}. See `gigpo plan` for the parts; "
                        "GIGPO_PLAN_CHECK=0 launches anyway.")
    return plan


def render(plan: Plan, config: Any, gpu_gib: Optional[float] = None) -> str:
    """The report `gigpo plan` prints; `gpu_gib`: the card the peak is compared with."""
    g = lambda b: f"{b / GIB:8.2f} GiB"  # noqa: E731
    s, t, r = plan.shape, config.trainer, config.rollout
    lines = [f"model: {s.params / 1e9:.3f}B parameters ({s.num_hidden_layers} layers, hidden {s.hidden_size}, "
             f"vocabulary {s.vocab_size}); shape from {plan.source}",
             f"ranks: {t.nprocs}, ZeRO stage {t.zero_stage}, {config.model.dtype}, micro_token_budget "
             f"{t.micro_token_budget}, gradient checkpointing {'on' if config.model.gradient_checkpointing else 'off'}"
             + (f", LoRA rank {config.model.lora.rank} ({s.lora_params(config.model.lora.rank) / 1e6:.1f}M trainable)"
                if config.model.lora.enabled else ""), ""]
    if plan.on_gpu:
        lines += _render_phases(plan, config, gpu_gib)
    else:
        lines.append("per rank, host RAM (CPU training):")
        lines += [f"  {k:<22}{g(v)}" for k, v in plan.trainer.items()]
        lines.append(f"  {'= every rank':<22}{g(plan.trainer_bytes)}")
    lines += ["", "host RAM:", f"  {'each rank':<22}{g(plan.host_rank)}  (its generator process and "
              f"{plan.env_workers} env workers" + (", vLLM's weights while it sleeps at level 1" if plan.on_gpu
              and r.sleep_level == 1 and r.backend == "vllm" and r.mode == "sync" else "")
              + ("" if plan.on_gpu else ", its training state and generator") + ")"]
    if plan.host_rank0_extra:
        lines.append(f"  {'rank 0 extra':<22}{g(plan.host_rank0_extra)}  (the whole model, gathered for checkpoints)")
    lines += [f"  {'= this machine':<22}{g(plan.host_total())}  (all {plan.nprocs} ranks on one machine)",
              "", f"env workers: {plan.env_workers} processes per rank (env.workers"
              + (f"={config.env.workers}" if config.env.workers else " unset: this machine's cores over the ranks")
              + f"), each ~1 core while stepping and ~{plan.env_worker_gib:.2f} GiB;"
              f" {config.env.num_groups * config.env.group_size} environments per rollout."]
    return "\n".join(lines) + "\n"


def _render_phases(plan: Plan, config: Any, gpu_gib: Optional[float]) -> list[str]:
    """One rank's GPU in each memory phase, side by side, then the peak against the card."""
    r = config.rollout
    tp = r.tensor_parallel_size
    engines = f"{plan.nprocs // tp} vLLM engine(s) of {tp} rank(s)" if r.backend == "vllm" else f"generator: {r.backend}"
    sleep = (f"sleeps at level {r.sleep_level} during the update" if r.backend == "vllm" and r.mode == "sync"
             and r.sleep_level else "never sleeps")
    lines = [f"per rank, GPU, colocated ({engines}, gpu_memory_utilization {r.gpu_memory_utilization}; "
             f"the engine {sleep}):", f"  {'':<22}{'generation':>12}{'update':>12}"]
    update, generation = plan.phases["update"], plan.phases["generation"]
    names = list(dict.fromkeys([k for k in update if k != "vLLM asleep"] + list(generation) + list(update)))
    for name in names:
        row = [plan.phases[p].get(name) for p in ("generation", "update")]
        lines.append(f"  {name:<22}" + "".join(f"{v / GIB:8.2f} GiB" if v is not None else f"{'-':>12}" for v in row))
    totals = [sum(plan.phases[p].values()) for p in ("generation", "update")]
    lines.append(f"  {'= phase total':<22}" + "".join(f"{v / GIB:8.2f} GiB" for v in totals))
    kv = plan.generator.get("vLLM KV cache")
    if kv is not None:
        per_token = kv_bytes_per_token(plan.shape, 2 if config.model.dtype == "bf16" else 4) / tp
        lines.append(f"  (each engine's KV cache holds ~{int(kv // per_token):,} tokens: "
                     f"{kv / per_token / (r.max_prompt_tokens + r.max_new_tokens):.0f} full-length sequences)")
    name, peak = plan.peak_phase()
    card = gpu_gib or device_gib()
    left = (card or 0) - peak / GIB
    spare = "" if not card else (f" of a {card:.0f} GiB card: {left:.1f} GiB ({left / card:.0%}) to spare" if left >= 0
                                 else f": over a {card:.0f} GiB card by {-left:.1f} GiB")
    lines.append(f"  peak per rank: {peak / GIB:.2f} GiB in {name} (the larger phase, not the sum){spare}")
    return lines
