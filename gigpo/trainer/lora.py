"""LoRA on the trainer's models with peft: wrapping, merged weights for the generator, adapter files.

The actor (and PPO's critic) wraps its Hugging Face model in a `PeftModel` before DeepSpeed sees it, so
DeepSpeed's optimizer holds the adapters only (and the critic's value head, which peft trains whole as a
"module to save"); the base weights stay frozen in every ZeRO stage.

What leaves the trainer is always named like the base model:
- the generator gets merged weights, W + B @ A * alpha / r per adapted layer, under the base
  parameter's own name (so hf, vllm and vllm-server load them like any full sync);
- checkpoints keep a merged Hugging Face model (plain transformers and vLLM load it) and the adapters
  in peft's own format (`PeftModel.from_pretrained(base, dir)` loads them).
The KL reference is the same network with its adapters switched off (`disable_adapter()`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor

ALL_LINEAR = "all-linear"
VALUE_HEAD = "score"
"""The critic's head (transformers' token-classification models name it so)."""
PEFT_PREFIX = "base_model.model."
"""What peft puts before the base model's own parameter names."""


@dataclass(frozen=True)
class LoraSettings:
    """Adapter shape (gigpo.config.LoraConfig holds the defaults)."""

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]


def lora_settings(config: Any) -> "LoraSettings | None":
    """The settings of `model.lora`, or None when LoRA is off."""
    lora = config.model.lora
    if not lora.enabled:
        return None
    return LoraSettings(rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, target_modules=tuple(lora.target_modules))


def wrap(model: torch.nn.Module, settings: LoraSettings, value_head: bool = False) -> torch.nn.Module:
    """`model` as a PeftModel whose adapters (and value head) are its only trainable parameters."""
    from peft import LoraConfig, TaskType, get_peft_model

    targets: Any = ALL_LINEAR if settings.target_modules == (ALL_LINEAR,) else list(settings.target_modules)
    peft_config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                             target_modules=targets, bias="none",
                             # the value head is trained whole (peft's modules_to_save), not adapted
                             exclude_modules=[VALUE_HEAD] if value_head else None,
                             task_type=TaskType.TOKEN_CLS if value_head else TaskType.CAUSAL_LM)
    try:
        wrapped = get_peft_model(model, peft_config)
    except ValueError as exc:  # peft names the module it could not find
        raise ValueError(f"model.lora.target_modules={list(settings.target_modules)} does not fit this model: {exc}") from exc
    _reject_tied_targets(wrapped)
    return wrapped


def _reject_tied_targets(model: torch.nn.Module) -> None:
    """An adapter on a tied embedding/head would change one use and not the other: refuse it."""
    from peft.tuners.lora import LoraLayer

    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return
    base = model.get_base_model()
    tied = {id(base.get_input_embeddings())}
    if base.get_output_embeddings() is not None:
        tied.add(id(base.get_output_embeddings()))
    for name, sub in model.named_modules():
        if isinstance(sub, LoraLayer) and id(sub.get_base_layer()) in tied:
            raise ValueError(f"model.lora.target_modules adapts {name}, which this model ties to its "
                             "embedding; target linear layers only")


def is_lora(module: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(module, PeftModel)


def trainable_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def base_name(peft_name: str) -> str:
    """`base_model.model.x.q_proj.base_layer.weight` -> `x.q_proj.weight` (the base model's name)."""
    return peft_name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


class _Gathered:
    """`deepspeed.zero.GatheredParameters` under ZeRO-3, nothing otherwise."""

    def __init__(self, params: Sequence[Tensor], zero3: bool):
        import deepspeed

        self.ctx = deepspeed.zero.GatheredParameters(list(params), modifier_rank=None) if zero3 and params else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc) if self.ctx is not None else False


def merged_weights(model: torch.nn.Module, zero3: bool, on_device: bool = False) -> Iterator[tuple[str, Tensor]]:
    """The base model's parameters with every adapter merged in, as (base name, CPU tensor).

    Same names and order as the plain model's `named_parameters()`. Under ZeRO-3 all ranks iterate
    together: one module's parameters (an adapted layer: its base weight and both factors) are
    gathered at a time. The merge is done in float32 and cast back to the base weight's dtype.
    `on_device`: tensors stay where they are (the merged weight is new; the others are the parameters).
    """
    def out(t: Tensor) -> Tensor:
        return t if on_device else t.to("cpu", copy=True)

    from peft.tuners.lora import LoraLayer

    adapter = model.active_adapter
    inside_lora: set[str] = set()
    seen: set[int] = set()
    for prefix, sub in model.named_modules():
        if any(prefix.startswith(p + ".") for p in inside_lora):
            continue
        if isinstance(sub, LoraLayer):
            inside_lora.add(prefix)
            base = sub.get_base_layer()
            with _Gathered(list(sub.parameters()), zero3):
                weight = base.weight.detach().float() + sub.get_delta_weight(adapter).detach().float()
                yield base_name(f"{prefix}.weight"), out(weight.to(base.weight.dtype))
                if base.bias is not None:
                    yield base_name(f"{prefix}.bias"), out(base.bias.detach())
            continue
        params = [(n, p) for n, p in sub.named_parameters(recurse=False) if id(p) not in seen]
        seen.update(id(p) for _, p in params)
        if not params:
            continue
        with _Gathered([p for _, p in params], zero3):
            for name, p in params:
                yield base_name(f"{prefix}.{name}"), out(p.detach())


def adapter_state(model: torch.nn.Module, zero3: bool) -> dict[str, Tensor]:
    """Full copies of the trainable tensors (adapters, a critic's head) under peft's names; all ranks call."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    with _Gathered([p for _, p in params], zero3):
        return {n: p.detach().to("cpu", copy=True) for n, p in params}


def save_adapter(model: torch.nn.Module, out: Path, zero3: bool, is_main: bool) -> None:
    """The adapters in peft's format (adapter_config.json + adapter_model.safetensors); all ranks call."""
    state = adapter_state(model, zero3)
    if is_main:
        model.save_pretrained(str(out), state_dict=state, safe_serialization=True)


def save_merged(model: torch.nn.Module, state: dict[str, Tensor], out: Path) -> None:
    """A plain Hugging Face model (base names, merged weights) that transformers and vLLM load."""
    model.get_base_model().save_pretrained(str(out), state_dict=state, safe_serialization=True)


class AdapterFreeReference:
    """The KL reference of a LoRA actor: its own forward with the adapters switched off.

    Nothing is loaded: the base weights the actor trains adapters on are the initial policy's. Every
    rank calls `compute_log_probs` together, as with the actor.
    """

    def __init__(self, actor: Any) -> None:
        if not is_lora(actor.engine.module):
            raise ValueError("AdapterFreeReference needs a LoRA actor (model.lora.enabled=true)")
        self.actor = actor

    def compute_log_probs(self, samples: Sequence[Any], with_entropy: bool = False):
        with self.actor.engine.module.disable_adapter():
            return self.actor.compute_log_probs(samples, with_entropy=with_entropy)
