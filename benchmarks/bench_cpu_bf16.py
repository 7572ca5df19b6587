"""bf16 on this CPU: torch's own bf16 kernels against gigpo.infra.cpu_bf16's widened ones, with fp32 as the yardstick.

    PYTHONPATH=. python benchmarks/bench_cpu_bf16.py                          # SmolLM2-135M-Instruct
    PYTHONPATH=. python benchmarks/bench_cpu_bf16.py --model DIR --batch 16 --skip-native

Three workloads, each in three modes: `native` (bf16 as torch runs it here), `widened` (bf16 through
Bf16MatmulsInFp32) and `fp32`. A matmul of SmolLM2's MLP shape; one warm-up step as gigpo's supervised warm-up
takes it (fp32 weights, bf16 autocast forward and backward, `--batch` rows of `--tokens` tokens); and the hf
generation backend sampling `--prompts` prompts of 60 tokens for 8 new tokens. On a CPU with native bf16
(AVX-512) `widened` is not what gigpo runs (it leaves bf16 alone there), and `native` is the baseline to beat.
Prints the load average, then one line per measurement with the ratio of `native` to it (above 1 = faster
than torch's bf16) and of it to `fp32`. `--skip-native` leaves out the native warm-up step and generation,
which take minutes on an AVX2-only CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Callable

import torch

from gigpo.infra.cpu_bf16 import Bf16MatmulsInFp32
from gigpo.infra.dtypes import cpu_has_fast_bf16


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Seconds of the fastest of `repeats` calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def mode_context(mode: str):
    return Bf16MatmulsInFp32() if mode == "widened" else contextlib.nullcontext()


def matmul_seconds(mode: str) -> float:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1024, 576, generator=g), torch.randn(576, 1536, generator=g)
    if mode != "fp32":
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    with mode_context(mode):
        return best_of(lambda: a @ b, 1 if mode == "native" else 5)


def warmup_step_seconds(model_dir: str, mode: str, batch: int, tokens: int) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        with mode_context(mode), torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode != "fp32"):
            loss = model(input_ids=ids, labels=ids).loss
        with mode_context(mode):
            loss.backward()
        model.zero_grad()

    return best_of(step, 1)


def generation_seconds(model_dir: str, mode: str, prompts: int) -> float:
    from gigpo.rollout.hf_backend import HFGenerator
    from gigpo.rollout.types import SamplingSettings

    gen = HFGenerator(model_dir, dtype="fp32" if mode == "fp32" else "bf16")
    if mode == "native":  # the generator widens by itself where bf16 is emulated; asked as fp32 it leaves bf16 be
        gen.dtype = "fp32"
    rows = [list(range(100 + i, 160 + i)) for i in range(prompts)]
    settings = SamplingSettings(temperature=1.0, max_new_tokens=8, seed=0)
    return best_of(lambda: gen.generate(rows, settings), 1)


def report(name: str, seconds: dict[str, float]) -> None:
    for mode, s in seconds.items():
        vs_native = f"{seconds['native'] / s:.1f}x" if "native" in seconds else "-"
        print(f"{name:<12} {mode:<8} {s:9.3f} s   native/this {vs_native:>7}   this/fp32 {s / seconds['fp32']:.2f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: smollm2-135m-instruct, fetched)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=78)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--skip-native", action="store_true")
    args = parser.parse_args()
    from gigpo.models.resolve import resolve_model_path

    model_dir = args.model or resolve_model_path("smollm2-135m-instruct", None)
    print(f"load average {os.getloadavg()}; native bf16 kernels: {cpu_has_fast_bf16()}; "
          f"threads {torch.get_num_threads()}", flush=True)
    modes = ("fp32", "widened") if args.skip_native else ("fp32", "widened", "native")
    report("matmul", {m: matmul_seconds(m) for m in ("fp32", "widened", "native")})
    report("warm-up step", {m: warmup_step_seconds(model_dir, m, args.batch, args.tokens) for m in modes})
    report("generation", {m: generation_seconds(model_dir, m, args.prompts) for m in modes})
    print(f"load average {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
