"""The sync probe's log-prob gaps between vLLM and the trainer's model, with correct syncs and with broken
ones: the measurements behind `gigpo/rollout/weight_sync/verify.py`'s tolerances for a dtype.

    PYTHONPATH=. python benchmarks/sync_gap.py [--model smollm2-135m-instruct] [--dtype bf16]

The trainer's model is loaded as the actor holds it (the dtype's weights, eval mode). Rows:
- `correct` after loading, then after each of `--updates` synced weight moves of `--scale`
  (randn x scale on every parameter, a far larger step than lr 1e-5 makes);
- `fault_skip_lm_head` and `fault_skip_prefix_reset` (the sync faults `vllm_backend` can inject) after
  one more move of `--fault-scale`.
Each row prints the largest and mean gap over the probe's 16 tokens and whether the dtype's bounds pass.
"""
from __future__ import annotations

import argparse
import math

import torch
from transformers import AutoModelForCausalLM

from gigpo.infra.dtypes import torch_dtype
from gigpo.models.resolve import resolve_model_path
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.factory import make_generator
from gigpo.rollout.weight_sync.verify import SyncVerifier, default_tolerance


def move(model: torch.nn.Module, seed: int, scale: float) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((torch.randn(p.shape, generator=gen) * scale).to(p.dtype))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1e-3)
    ap.add_argument("--fault-scale", type=float, default=1e-2)
    args = ap.parse_args()

    path = resolve_model_path(args.model, None)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(args.dtype)).eval()
    gen = make_generator("vllm", path, EngineSettings(dtype=args.dtype, max_num_seqs=8, max_model_len=512,
                                                      enforce_eager=True))
    atol, mean_atol = default_tolerance(args.dtype)
    verifier = SyncVerifier(gen, model.config.vocab_size, atol=math.inf, mean_atol=math.inf)
    print(f"model {args.model} ({path}), dtype {args.dtype}, bounds: largest <= {atol}, mean <= {mean_atol}")
    print(f"{'row':<28} {'largest':>8} {'mean':>8}  verdict")

    def row(name: str) -> None:
        [(_, got, ref)] = verifier.gaps(model)
        gap = (got - ref).abs()
        ok = gap.max() <= atol and gap.mean() <= mean_atol
        print(f"{name:<28} {gap.max():8.4f} {gap.mean():8.4f}  {'passes' if ok else 'FAILS'}", flush=True)

    row("correct, as loaded")
    for k in range(1, args.updates + 1):
        move(model, seed=k, scale=args.scale)
        gen.update_weights(model.named_parameters(), version=k)
        row(f"correct, after move {k}")
    version = args.updates
    for i, fault in enumerate(("fault_skip_lm_head", "fault_skip_prefix_reset")):
        move(model, seed=100 + i, scale=args.fault_scale)
        setattr(gen, fault, True)
        version += 1
        gen.update_weights(model.named_parameters(), version=version)
        row(fault)
        setattr(gen, fault, False)
        version += 1
        gen.update_weights(model.named_parameters(), version=version)
        row("correct, after the fault")
    gen.close()


if __name__ == "__main__":
    main()
