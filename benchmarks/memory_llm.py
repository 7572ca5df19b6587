"""Where the memory of one training iteration goes, for a real model: what must be resident (actor
parameters, gradients and optimizer states, the reference, the generator's copy) against each phase's peak.

    PYTHONPATH=. python benchmarks/memory_llm.py recipes/sokoban_smollm2.yaml [overrides ...]
    PYTHONPATH=. python benchmarks/memory_llm.py recipes/sokoban_smollm2.yaml --samples 64 --prompt 124 --response 96

It builds the recipe's engines and an HF generator (`rollout.backend=hf`: the generator's copy lives in
this process), then runs the phases of an iteration on synthetic steps of the given shape: generation,
old and reference log-probs, the update. Live tensor bytes are counted from the objects themselves
(parameters, gradients, and everything else the optimizer holds), peaks with gigpo.trainer.memory (the
kernel's high-water mark, reset per phase). The last line is machine-readable.
"""
from __future__ import annotations

import argparse
import gc
import json
import time

import torch

from gigpo.config import load_config
from gigpo.models.resolve import resolve_model_path
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.types import SamplingSettings
from gigpo.trainer.batching import TrainSample
from gigpo.trainer.distributed import shutdown_distributed
from gigpo.trainer.engines import ActorEngine, ReferenceModel, settings_from_config
from gigpo.trainer.memory import peak_rss_gib, release_freed_memory, reset_peaks, rss_gib

GIB = 2**30
TRIM = True  # release freed heap memory before each phase, as the trainer's PhaseTimer does


def live_tensor_bytes() -> int:
    """Bytes of every distinct tensor storage reachable by the garbage collector."""
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj) and obj.device.type == "cpu":
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
        except Exception:  # some objects raise on inspection
            continue
    return sum(seen.values())


def module_bytes(module: torch.nn.Module, grads: bool = False) -> int:
    tensors = [p.grad if grads else p for p in module.parameters()]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def make_samples(n: int, prompt: int, response: int, vocab: int) -> list[TrainSample]:
    g = torch.Generator().manual_seed(0)
    return [TrainSample(torch.randint(3, vocab, (prompt,), generator=g).tolist(),
                        torch.randint(3, vocab, (response,), generator=g).tolist(),
                        advantage=float(torch.randn(1, generator=g))) for _ in range(n)]


def phase(name: str, fn, report: dict) -> object:
    if TRIM:
        release_freed_memory()
    else:
        gc.collect()
    reset_peaks()
    start = time.perf_counter()
    out = fn()
    report[f"peak_{name}_gib"] = round(peak_rss_gib(), 3)
    report[f"seconds_{name}"] = round(time.perf_counter() - start, 1)
    print(f"{name}: peak {report[f'peak_{name}_gib']:.2f} GiB, {report[f'seconds_{name}']:.1f} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--samples", type=int, default=64, help="training steps (rows) in the iteration")
    parser.add_argument("--prompt", type=int, default=124, help="prompt tokens per step")
    parser.add_argument("--response", type=int, default=96, help="response tokens per step")
    parser.add_argument("--no-trim", action="store_true", help="ablation: do not malloc_trim between phases")
    args = parser.parse_args()
    global TRIM
    TRIM = not args.no_trim
    config = load_config(args.recipe, [*args.overrides, "rollout.backend=hf"])
    path = resolve_model_path(config.model.path, config.model.init)
    report: dict[str, float] = {"rss_start_gib": round(rss_gib(), 3)}

    settings, loss = settings_from_config(config)
    actor = ActorEngine(path, settings, loss)
    if TRIM:
        release_freed_memory()
    report["rss_actor_gib"] = round(rss_gib(), 3)
    reference = ReferenceModel(path, settings)
    if TRIM:
        release_freed_memory()
    report["rss_reference_gib"] = round(rss_gib(), 3)
    generator = HFGenerator(path, dtype=config.model.dtype)
    if TRIM:
        release_freed_memory()
    report["rss_generator_gib"] = round(rss_gib(), 3)
    vocab = actor.hf_module().config.vocab_size
    samples = make_samples(args.samples, args.prompt, args.response, vocab)

    sampling = SamplingSettings(temperature=1.0, max_new_tokens=args.response, seed=0)
    phase("generate", lambda: generator.generate([s.prompt_ids for s in samples], sampling), report)
    generator.end_rollout()  # as `rollout` does: the prompt cache does not outlive the rollout

    def logprobs():
        for s, lp in zip(samples, actor.compute_log_probs(samples)):
            s.logp_old = lp
        for s, lp in zip(samples, reference.compute_log_probs(samples)):
            s.logp_ref = lp

    phase("logprobs", logprobs, report)
    phase("update", lambda: actor.update(samples), report)
    gc.collect()
    report["rss_after_gib"] = round(rss_gib(), 3)

    module = actor.hf_module()
    params = module_bytes(module)
    grads = module_bytes(module, grads=True)
    ref_params = module_bytes(reference.module)
    gen_params = module_bytes(generator.model)
    total = live_tensor_bytes()
    optimizer = total - params - grads - ref_params - gen_params  # fp32 master copy, fp32 grads, Adam moments
    n_params = sum(p.numel() for p in module.parameters())
    step_grads = 0 if grads else 4 * n_params  # fp32 gradients live from backward to the step, freed after it
    resident = total + step_grads
    report.update({
        "actor_params_gib": round(params / GIB, 3), "actor_param_grads_gib": round(grads / GIB, 3),
        "fp32_step_grads_gib": round(step_grads / GIB, 3), "trim": TRIM,
        "optimizer_and_master_gib": round(optimizer / GIB, 3), "reference_gib": round(ref_params / GIB, 3),
        "generator_gib": round(gen_params / GIB, 3), "must_be_resident_gib": round(resident / GIB, 3),
        "parameters": n_params,
        "micro_token_budget": settings.micro_token_budget, "samples": args.samples,
        "prompt": args.prompt, "response": args.response, "dtype": config.model.dtype,
        "gradient_checkpointing": settings.gradient_checkpointing,
    })
    worst = max(v for k, v in report.items() if k.startswith("peak_"))
    report["worst_peak_over_resident"] = round(worst * GIB / resident, 2)
    print(json.dumps(report))
    shutdown_distributed()


if __name__ == "__main__":
    main()
