"""Generated tokens/s of the hf, vllm and vllm-server backends on a rollout-shaped workload, and
weight-sync latency by model size.

Workload: groups of 8 prompts share a long task prefix (an agent's task description) and differ in
a short suffix (its own history); outputs are sampled (temperature 1) and end at an end token at
varying lengths. The models are random-weight local builds, which almost never pick EOS, so each
run names `--stop-set` random token ids as extra end tokens: with near-uniform next-token
probabilities an output then ends after ~vocab/stop_set tokens (geometric lengths), capped by
--max-new-tokens. Every backend gets the same prompts, seeds and settings.

    PYTHONPATH=. python benchmarks/bench_generation.py --sizes tiny small --prompts 64 256
    PYTHONPATH=. python benchmarks/bench_generation.py --sizes base05b --prompts 256 --backends hf vllm

Prints one JSON line per measurement and a table; `--out FILE` also writes the JSON lines.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GROUP_SIZE = 8


def rollout_prompts(num_prompts: int, vocab: int, prefix_tokens: int, suffix_tokens: int, seed: int = 0) -> list[list[int]]:
    """Groups of GROUP_SIZE prompts sharing a `prefix_tokens` prefix; each prompt has its own suffix."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    prompts = []
    for g in range((num_prompts + GROUP_SIZE - 1) // GROUP_SIZE):
        prefix = torch.randint(3, vocab, (prefix_tokens,), generator=gen).tolist()
        for _ in range(GROUP_SIZE):
            n = int(torch.randint(suffix_tokens // 2, suffix_tokens + 1, (1,), generator=gen))
            prompts.append(prefix + torch.randint(3, vocab, (n,), generator=gen).tolist())
    return prompts[:num_prompts]


def build(backend: str, model_dir: str, dtype: str, kv_cache_gb: float, max_model_len: int, prefix_caching: bool):
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.factory import make_generator

    return make_generator(backend, model_dir, EngineSettings(dtype=dtype, kv_cache_gb=kv_cache_gb, max_num_seqs=256,
                                                             enable_prefix_caching=prefix_caching,
                                                             max_model_len=max_model_len))


def measure_generation(gen: Any, prompts: list[list[int]], settings: Any) -> dict[str, float]:
    gen.generate(prompts[:GROUP_SIZE], settings)  # warm-up: first-call allocations, kernel selection
    start = time.perf_counter()
    out = gen.generate(prompts, settings)
    seconds = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for c in out)
    ended = sum(c.finish_reason == "stop" for c in out)
    return {"seconds": round(seconds, 2), "generated_tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
            "mean_len": round(tokens / len(out), 1), "ended_by_stop": round(ended / len(out), 2)}


def measure_sync(gen: Any, model: Any, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        gen.update_weights(model.named_parameters(), gen.version + 1)
        times.append(time.perf_counter() - start)
    return round(sorted(times)[len(times) // 2], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"], choices=["tiny", "small", "base05b"])
    parser.add_argument("--prompts", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm", "vllm-server"])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--prefix-tokens", type=int, default=384)
    parser.add_argument("--suffix-tokens", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--mean-new-tokens", type=int, default=48, help="target mean output length (sets --stop-set)")
    parser.add_argument("--kv-cache-gb", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=None,
                        help="cores per backend: torch threads for hf, VLLM_CPU_OMP_THREADS_BIND=0-(N-1) for vllm "
                             "(default: torch's and vLLM's own choice, i.e. all cores)")
    parser.add_argument("--no-prefix-caching", action="store_true", help="vLLM ablation: no prefix cache")
    parser.add_argument("--no-sync", action="store_true", help="skip the weight-sync latency measurement")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{args.threads - 1}"
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from gigpo.models.local import cached_local_model
    from gigpo.rollout.types import SamplingSettings

    rows = []
    for size in args.sizes:
        model_dir = str(cached_local_model(size))
        vocab = len(AutoTokenizer.from_pretrained(model_dir))  # sample prompt ids the tokenizer knows
        model_vocab = AutoConfig.from_pretrained(model_dir).vocab_size
        stop_set = max(1, round(model_vocab / args.mean_new_tokens))
        stop_ids = tuple(torch.randperm(model_vocab, generator=torch.Generator().manual_seed(1))[:stop_set].tolist())
        settings = SamplingSettings(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0, stop_token_ids=stop_ids)
        max_len = args.prefix_tokens + args.suffix_tokens + args.max_new_tokens + 8
        trainer = None if args.no_sync else AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        for backend in args.backends:
            start = time.perf_counter()
            gen = build(backend, model_dir, args.dtype, args.kv_cache_gb, max_len, not args.no_prefix_caching)
            startup = round(time.perf_counter() - start, 1)
            try:
                for n in args.prompts:
                    prompts = rollout_prompts(n, vocab, args.prefix_tokens, args.suffix_tokens)
                    row = {"size": size, "backend": backend, "prompts": n, "dtype": args.dtype, "startup_s": startup,
                           "threads": args.threads or "all", "prefix_caching": not args.no_prefix_caching, "load_avg_1m": round(os.getloadavg()[0], 1),
                           **measure_generation(gen, prompts, settings)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if trainer is not None:
                    row = {"size": size, "backend": backend, "sync_s": measure_sync(gen, trainer),
                           "params_m": round(sum(p.numel() for p in trainer.parameters()) / 1e6, 1)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                gen.close()
    if args.out:
        with open(args.out, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    gen_rows = [r for r in rows if "tokens_per_s" in r]
    hf = {(r["size"], r["prompts"]): r["tokens_per_s"] for r in gen_rows if r["backend"] == "hf"}
    print(f"\n{'size':8} {'backend':12} {'prompts':>7} {'tok/s':>8} {'x hf':>6} {'mean len':>8} {'s':>7}")
    for r in gen_rows:
        base = hf.get((r["size"], r["prompts"]))
        ratio = f"{r['tokens_per_s'] / base:.2f}" if base else "-"
        print(f"{r['size']:8} {r['backend']:12} {r['prompts']:>7} {r['tokens_per_s']:>8} {ratio:>6} "
              f"{r['mean_len']:>8} {r['seconds']:>7}")
    for r in rows:
        if "sync_s" in r:
            print(f"sync {r['size']:8} ({r['params_m']}M params) {r['backend']:12} {r['sync_s']} s")


if __name__ == "__main__":
    main()
