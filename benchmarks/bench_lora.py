"""LoRA vs full fine-tuning on the trainer side, and adapter-only vs merged weight sync into vLLM.

    PYTHONPATH=. python benchmarks/bench_lora.py                        # tiny preset, trainer part
    PYTHONPATH=. python benchmarks/bench_lora.py --model-dir DIR --samples 16 --rank 16
    PYTHONPATH=. python benchmarks/bench_lora.py --vllm [--no-trainer]  # + vLLM sync part

Trainer part: each mode runs in its own process (so peak RSS is that mode's), one rank, ZeRO-2, the
model's dtype, on agent-step shaped samples (prompts 200..700 tokens, responses 8..200). One trainer
iteration = old log-probs (actor) + reference log-probs + update (forward, backward, AdamW) + the
weights the generator would get (full weights / adapters merged in); the rollout is the same in both
modes and is left out. Full fine-tuning loads a second model for the reference; LoRA runs the actor
with its adapters off. Each phase is timed on the last of `--iterations` iterations (the first warms up).

vLLM part (--vllm): one engine with LoRA enabled; the merged sync (full weights through /dev/shm and
reload_weights) against the adapter-only sync (peft files to /dev/shm, `add_lora`), each checked by
greedy equality with the LoRA actor, then generation speed with and without an adapter.
Prints one `key=value` line per measurement; `uptime` load average first (the machine is shared).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch


def make_samples(n: int, vocab: int, seed: int = 0):
    from gigpo.trainer.batching import TrainSample

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p, r = int(torch.randint(200, 700, (1,), generator=g)), int(torch.randint(8, 200, (1,), generator=g))
        out.append(TrainSample(torch.randint(3, vocab, (p,), generator=g).tolist(),
                               torch.randint(3, vocab, (r,), generator=g).tolist(),
                               advantage=float(torch.randn(1, generator=g))))
    return out


def settings(args, lora: bool):
    from gigpo.config import build_config
    from gigpo.trainer.engines import settings_from_config

    model = {"path": args.model_dir} if args.model_dir else {"init": args.preset}
    model.update(dtype=args.dtype, lora={"enabled": lora, "rank": args.rank, "alpha": 2.0 * args.rank})
    config = build_config({"model": model, "algorithm": {"kl_coef": 0.01},
                           "trainer": {"zero_stage": 2, "micro_token_budget": args.budget, "mini_batch_size": args.samples,
                                       "lr": 1e-5}})
    return settings_from_config(config)


def model_dir(args) -> str:
    if args.model_dir:
        return args.model_dir
    from gigpo.models.local import cached_local_model

    return str(cached_local_model(args.preset))


def one_mode(args) -> dict:
    """Runs in a child process: build, train `iterations` times, report the last iteration's phases."""
    from gigpo.trainer.engines import ActorEngine, ReferenceModel
    from gigpo.trainer.lora import AdapterFreeReference

    lora = args.one == "lora"
    engine_settings, loss = settings(args, lora)
    path = model_dir(args)
    start = time.perf_counter()
    actor = ActorEngine(path, engine_settings, loss)
    reference = AdapterFreeReference(actor) if lora else ReferenceModel(path, engine_settings)
    build_s = time.perf_counter() - start
    samples = make_samples(args.samples, actor.hf_module().config.vocab_size)
    tokens = sum(len(s) for s in samples)
    phases: dict[str, float] = {}
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        for s, lp in zip(samples, actor.compute_log_probs(samples)):
            s.logp_old = lp
        t1 = time.perf_counter()
        for s, lp in zip(samples, reference.compute_log_probs(samples)):
            s.logp_ref = lp
        t2 = time.perf_counter()
        actor.update(samples)
        t3 = time.perf_counter()
        n_weights = sum(t.numel() for _, t in actor.named_weights())
        t4 = time.perf_counter()
        phases = {"logprobs_s": t1 - t0, "reference_s": t2 - t1, "update_s": t3 - t2, "weights_s": t4 - t3,
                  "iteration_s": t4 - t0}
    params = list(actor.hf_module().parameters())
    return {"mode": args.one, **{k: round(v, 3) for k, v in phases.items()}, "build_s": round(build_s, 2),
            "trainable_params": sum(p.numel() for p in params if p.requires_grad),
            "total_params": sum(p.numel() for p in params), "weights_sent": n_weights, "tokens": tokens,
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def trainer_part(args) -> None:
    for mode in ("full", "lora"):
        cmd = [sys.executable, __file__, "--one", mode, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} run failed (exit code {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)


def vllm_part(args) -> None:
    from gigpo.rollout.types import SamplingSettings
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.vllm_backend import VLLMGenerator
    from gigpo.rollout.weight_sync.tensors import shm_dir
    from gigpo.trainer.engines import ActorEngine
    from gigpo.trainer.lora import save_adapter

    path = model_dir(args)
    engine_settings, loss = settings(args, lora=True)
    actor = ActorEngine(path, engine_settings, loss)
    with torch.no_grad():  # trained-looking adapters: B away from zero
        gen = torch.Generator().manual_seed(0)
        for p in actor.hf_module().parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * 0.02)
    prompts = [s.prompt_ids for s in make_samples(args.samples, actor.hf_module().config.vocab_size, seed=1)]
    greedy = SamplingSettings(temperature=0, max_new_tokens=32)
    engine = EngineSettings(dtype=args.dtype, max_num_seqs=64, max_model_len=1024, enforce_eager=True)
    merged_gen = VLLMGenerator(path, engine)
    lora_gen = VLLMGenerator(path, engine.replace(max_lora_rank=args.rank))
    try:
        timings: dict[str, list[float]] = {"merged_sync_s": [], "adapter_sync_s": []}
        for version in range(1, args.iterations + 2):
            t0 = time.perf_counter()
            merged_gen.update_weights(actor.named_weights(), version)
            t1 = time.perf_counter()
            adapter_dir = shm_dir() / f"gigpo-adapter-{os.getpid()}-{version}"
            save_adapter(actor.hf_module(), adapter_dir, zero3=False, is_main=True)
            lora_gen.load_adapter(adapter_dir, version)
            t2 = time.perf_counter()
            timings["merged_sync_s"].append(t1 - t0)
            timings["adapter_sync_s"].append(t2 - t1)
        merged_out = merged_gen.generate(prompts, greedy)
        adapter_out = lora_gen.generate(prompts, greedy)
        same = sum(a.token_ids == b.token_ids for a, b in zip(merged_out, adapter_out))
        rates = {}
        for name, generator in (("merged", merged_gen), ("adapter", lora_gen)):
            t = time.perf_counter()
            out = generator.generate(prompts, greedy)
            rates[f"{name}_gen_tok_s"] = round(sum(len(c.token_ids) for c in out) / (time.perf_counter() - t), 1)
        print(" ".join([f"{k}={min(v[1:]):.3f}" for k, v in timings.items()]
                       + [f"{k}={v}" for k, v in rates.items()]
                       + [f"greedy_equal={same}/{len(prompts)}", f"adapter_files_mb="
                          f"{sum(f.stat().st_size for f in adapter_dir.iterdir()) / 2**20:.2f}"]), flush=True)
    finally:
        merged_gen.close()
        lora_gen.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model-dir", default=None, help="a saved HF model directory (e.g. converted SmolLM2-135M)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--budget", type=int, default=8192)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--vllm", action="store_true", help="also measure the merged vs adapter-only sync into vLLM")
    parser.add_argument("--no-trainer", action="store_true", help="skip the trainer part (with --vllm)")
    parser.add_argument("--one", choices=["full", "lora"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if args.one:
        print(json.dumps(one_mode(args)))
        return
    print("load_average=" + ",".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    if not args.no_trainer:
        trainer_part(args)
    if args.vllm:
        vllm_part(args)


if __name__ == "__main__":
    main()
