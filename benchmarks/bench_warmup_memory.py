"""Peak resident memory of a real model's supervised warm-up, and what glibc's heap adds to it.

    PYTHONPATH=. python benchmarks/bench_warmup_memory.py                       # webshop_smollm2, 8 steps
    PYTHONPATH=. python benchmarks/bench_warmup_memory.py --recipe recipes/webshop_smollm2.yaml --steps 12 --rooms 100

Why: a SmolLM2-135M warm-up on ALFWorld's prompts held 10.5 GB, and `malloc_trim(0)` from a debugger
took it to 5.1 GB at once (2026-11-28): most of it was freed memory that glibc kept in its heap, not live
tensors. Each way runs the recipe's own warm-up (its demonstrations, batches, micro-batches, dtype and seed)
for `--steps` steps in a fresh process, so the peaks (VmHWM) are each way's own:
- kept: glibc keeps what is freed (`supervised_warmup(trim_every_s=None)`, the warm-up before 2026-11-28);
- trim: `release_freed_memory()` (gc + malloc_trim) after every optimizer step (`trim_every_s=0`, 2026-11-28 to 12-01);
- timed: the same, but at most every `TRIM_EVERY_S` seconds (the default now): every step of a slow model,
  every few steps of a fast one;
- mmap: kept, but with `MALLOC_MMAP_THRESHOLD_` fixed at `--mmap-threshold` bytes, so every larger tensor is its
  own mapping, returned to the kernel when freed (at the price of zeroing fresh pages on each allocation).
Each prints its peak, its RSS after the last step and the median seconds a step (the first excluded); the
trained weights must be the same in every way (same batches and arithmetic: checked by their sum), so only
memory and time differ.
The last line is machine-readable: peaks and step times with their ratios against `kept`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gigpo.trainer.sft_warmup import TRIM_EVERY_S

WAYS = ("kept", "trim", "timed", "mmap")
TRIM_BY_WAY = {"kept": None, "trim": 0.0, "timed": TRIM_EVERY_S, "mmap": None}


def run_one(recipe: str, steps: int, rooms: int, way: str, overrides: list[str]) -> dict:
    """One way's warm-up in this process; returns its figures."""
    from gigpo.config import load_config
    from gigpo.envs.demos import collect_demonstrations
    from gigpo.infra.seeds import demo_seeds, sft_warmup_seed
    from gigpo.models.resolve import resolve_model_path
    from gigpo.trainer.memory import peak_rss_gib, rss_gib
    from gigpo.trainer.setup import build_pool, build_prompt_fn
    from gigpo.trainer.sft_warmup import response_ids, supervised_warmup
    from transformers import AutoTokenizer

    config = load_config(recipe, [*overrides, "logging.progress=false"])
    t, e, m = config.trainer, config.env, config.model
    model_path = resolve_model_path(m.path, m.init, m.corpus, m.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    seed = sft_warmup_seed(t)
    with build_pool(config) as pool:
        demos = collect_demonstrations(pool, demo_seeds(e, seed, rooms), explore=1.0 - t.sft_expert_share, seed=seed)
    prompt_fn = build_prompt_fn(config, tokenizer)
    pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompt_fn([d.view for d in demos]), demos)]
    before_gib = rss_gib()  # this process alone: the demonstrations' env pool is closed
    if before_gib is None:
        raise SystemExit("this benchmark reads RSS from /proc: it needs Linux")
    times: list[float] = []
    fingerprint: list[float] = []
    last = [time.perf_counter()]

    def after_step(step: int, model) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        if step == steps:  # the trained weights' fingerprint: equal across ways if only memory differs
            fingerprint.append(float(sum(p.detach().double().sum() for p in model.parameters())))
        last[0] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        last[0] = time.perf_counter()
        supervised_warmup(model_path, Path(tmp), pairs, steps, t.sft_lr, t.sft_batch_size, seed, progress=False,
                          dtype=m.dtype, after_step=after_step, action_share=t.sft_action_share,
                          micro_tokens=t.sft_micro_tokens, trim_every_s=TRIM_BY_WAY[way])
    return {"way": way, "demonstrations": len(pairs), "rss_before_gib": before_gib,
            "peak_gib": peak_rss_gib(), "rss_end_gib": rss_gib(),
            "step_s": statistics.median(times[1:] or times), "fingerprint": fingerprint[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/webshop_smollm2.yaml")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rooms", type=int, default=100, help="demonstration episodes (the recipe's own seeds)")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--mmap-threshold", type=int, default=1 << 20)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one way in this process
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(args.recipe, args.steps, args.rooms, args.one, args.overrides)), flush=True)
        return
    print(f"load at start: {os.getloadavg()[0]:.2f}", flush=True)
    results = {}
    for way in args.ways.split(","):
        if way not in WAYS:
            raise SystemExit(f"--ways: {way!r} is not one of {', '.join(WAYS)}")
        env = dict(os.environ)
        if way == "mmap":
            env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
        cmd = [sys.executable, __file__, "--recipe", args.recipe, "--steps", str(args.steps), "--rooms", str(args.rooms),
               "--one", way, *args.overrides]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            raise SystemExit(f"way {way} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
        r = json.loads(line[len("RESULT "):])
        results[way] = r
        print(f"{way:8s} demonstrations {r['demonstrations']}  before warm-up {r['rss_before_gib']:.2f} GiB  "
              f"peak {r['peak_gib']:.2f} GiB  after {r['rss_end_gib']:.2f} GiB  step {r['step_s']:.2f} s  "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)
    base = results.get("kept")
    if base is not None:
        for way, r in results.items():
            if r["fingerprint"] != base["fingerprint"]:
                print(f"note: {way}'s trained weights differ from kept's (sum {r['fingerprint']!r} against "
                      f"{base['fingerprint']!r}): not the same arithmetic")
    summary = {way: {"peak_gib": round(r["peak_gib"], 3), "step_s": round(r["step_s"], 3),
                     **({"peak_ratio": round(r["peak_gib"] / base["peak_gib"], 3),
                         "time_ratio": round(r["step_s"] / base["step_s"], 3)} if base else {})}
               for way, r in results.items()}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
