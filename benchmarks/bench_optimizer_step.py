"""One bf16 optimizer step, as gigpo's engines took it before and take it now (issue 56 item 2), on one rank.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/bench_optimizer_step.py [--preset small] [--steps 5]

before: DeepSpeed at ZeRO stage 0 with bf16, which builds FP16_UnfusedOptimizer (per parameter: an overflow
check read on the host, an fp32 norm, two copies), and engine.step() all-reduces every gradient at world size 1.
now: `gigpo.trainer.engines.deepspeed_config` (ZeRO-1 with fp32 gradient accumulation: BF16_Optimizer, one flat
fp32 master tensor), with the all-reduce off at one rank as `_TrainedEngine` sets it. Both take the same
AdamW, lr, clipping and model; each step follows one untimed forward and backward on the same tokens. Prints
the median step time and the host reads of one step (`aten._local_scalar_dense` and copies to the CPU, which
a GPU would wait for; on a CPU nothing waits, so the times here show only the work per parameter).
"""
from __future__ import annotations

import argparse
import statistics
import time

from gigpo.trainer.distributed import configure_accelerator, init_distributed

configure_accelerator()

import deepspeed  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class HostReads(TorchDispatchMode):
    """Counts scalar reads and copies to the CPU (as tests/support/dispatch.HostSyncs, casts left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        to_cpu = (name == "_to_copy" and kwargs.get("device") is not None
                  and torch.device(kwargs["device"]).type == "cpu" and kwargs.get("dtype") in (None, args[0].dtype))
        self.count += name == "_local_scalar_dense" or to_cpu
        return func(*args, **kwargs)


def build(model_dir: str, variant: str):
    from transformers import AutoModelForCausalLM

    from gigpo.config import build_config
    from gigpo.trainer.engines import deepspeed_config, settings_from_config

    settings, _ = settings_from_config(build_config({"model": {"init": "tiny", "dtype": "bf16"},
                                                     "trainer": {"zero_stage": 0, "lr": 1e-5, "grad_clip": 1.0}}))
    config = deepspeed_config(settings)
    if variant == "before":  # what deepspeed_config gave before: stage 0, bf16 gradients
        config["zero_optimization"] = {"stage": 0}
        config.pop("data_types", None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()], config=config)
    if variant == "now":
        engine.enable_backward_allreduce = False
    return engine


def time_steps(engine, steps: int, tokens: torch.Tensor) -> tuple[list[float], int]:
    times, reads = [], 0
    for k in range(steps + 1):  # the first step (Adam's state allocated) is not timed
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        with HostReads() as spy:
            start = time.perf_counter()
            engine.step()
            elapsed = time.perf_counter() - start
        if k:
            times.append(elapsed)
            reads = spy.count
    return times, reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", help="a gigpo.models.local preset (built once, cached)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    from gigpo.models.local import cached_local_model

    init_distributed()
    model_dir = str(cached_local_model(args.preset))
    tokens = torch.randint(3, 1000, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    for variant in ("before", "now", "before", "now"):  # alternated, so a change in the machine's load hits both
        engine = build(model_dir, variant)
        tensors = sum(1 for p in engine.module.parameters())
        times, reads = time_steps(engine, args.steps, tokens)
        print(f"{variant:6s} {type(engine.optimizer).__name__:22s} {tensors} tensors: step median "
              f"{statistics.median(times) * 1e3:8.1f} ms (min {min(times) * 1e3:.1f}), host reads per step {reads}",
              flush=True)
        del engine


if __name__ == "__main__":
    main()
