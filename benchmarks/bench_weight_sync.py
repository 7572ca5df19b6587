"""Weight-sync time against parameter count, on this machine's CPU: the shm file path (the default) and
the in-process path (rollout.weight_sync=inprocess), measured in one run.

    PYTHONPATH=. python benchmarks/bench_weight_sync.py [--presets tiny small] [--repeats 3]

For each `gigpo model init` preset, in fp32: the trainer's model is a plain HF model (what a ZeRO-0/1/2
actor holds). Old path: the host copies `named_weights()` yields, then `update_weights` on an engine
with weight_sync=shm (engine core in its own process: state dict clone, safetensors in /dev/shm, read back
by the worker). New path: `update_weights` with the parameters themselves on an engine with
weight_sync=inprocess. Prints the median of `--repeats` syncs each, the ratio, and the load average
(the machine is shared: figures move with it). Each preset runs in a fresh process, the shm engine first:
an in-process engine binds its process's threads when it starts, and vLLM's in-process state is per process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import statistics
import time

import torch


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def time_syncs(generator, tensors_fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        generator.update_weights(tensors_fn(), generator.version + 1)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(preset: str, repeats: int) -> dict:
    from transformers import AutoModelForCausalLM

    from gigpo.models.local import cached_local_model
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.vllm_backend import VLLMGenerator

    path = str(cached_local_model(preset))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    params = sum(p.numel() for p in model.parameters())
    row = {"preset": preset, "params": params}
    for sync in ("shm", "inprocess"):
        gen = VLLMGenerator(path, EngineSettings(dtype="fp32", enforce_eager=True, weight_sync=sync, max_num_seqs=8))
        try:
            if sync == "shm":  # what actor.named_weights() yields today: a host copy of every tensor
                tensors = lambda: ((n, p.detach().to("cpu", copy=True)) for n, p in model.named_parameters())
            else:
                tensors = lambda: model.named_parameters()
            gen.update_weights(tensors(), gen.version + 1)  # warm: first sync allocates
            row[sync] = time_syncs(gen, tensors, repeats)
            row[f"load_{sync}"] = load_average()
        finally:
            gen.close()
    row["threads_after"] = torch.get_num_threads()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["tiny", "small"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child process: measure this preset, print JSON
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, args.repeats)), flush=True)
        return
    print(f"torch threads at start: {torch.get_num_threads()}, load {load_average()}", flush=True)
    print("preset     params      shm_s   inprocess_s  shm/inprocess  load(1,5,15) shm | inprocess", flush=True)
    for preset in args.presets:
        child = subprocess.run([sys.executable, __file__, "--one", preset, "--repeats", str(args.repeats)],
                               capture_output=True, text=True)
        lines = [l for l in child.stdout.splitlines() if l.startswith("RESULT ")]
        if child.returncode or not lines:
            raise SystemExit(f"preset {preset} failed (exit {child.returncode}):\n{child.stderr[-3000:]}")
        r = json.loads(lines[-1][len("RESULT "):])
        print(f"{r['preset']:<8} {r['params']:>11,} {r['shm']:>8.3f} {r['inprocess']:>12.3f} {r['shm'] / r['inprocess']:>13.1f}"
              f"  {r['load_shm']} | {r['load_inprocess']}  (torch threads after: {r['threads_after']})", flush=True)


if __name__ == "__main__":
    main()
