"""Trainer throughput: gigpo's micro-batch layouts vs padding batches in arrival order.

    PYTHONPATH=. python benchmarks/bench_trainer.py                 # small preset (~30M), bf16, ~2-4 min
    PYTHONPATH=. python benchmarks/bench_trainer.py --preset tiny --samples 32 --quick

Samples are agent-step shaped: prompts of 200..700 tokens, responses of 8..200 tokens, random order.
All score the same samples under the same token budget, with the same model weights:
- packed / sorted: `ActorEngine.compute_log_probs` with layout "packed" (one row, no padding) and
  "padded" (sorted by length, left-padded); both run the LM head on response positions only;
- baseline: the same HF module, batches filled in arrival order until batch x longest > budget,
  right-padded with an attention mask, full-sequence LM head (the usual dynamic-batch baseline);
- update: `ActorEngine.update` (forward + backward + AdamW step) with the recipe's layout (auto).
Log-probs are checked equal before timings are reported. One rank, ZeRO-2 (as `gigpo train` on CPU).
The last line is `tokens=... packed_tok_s=... sorted_tok_s=... baseline_tok_s=... speedup=... update_tok_s=...`
(speedup: the recipe's layout vs the baseline).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from gigpo.config import build_config
from gigpo.models.local import cached_local_model
from gigpo.trainer.batching import TrainSample
from gigpo.trainer.distributed import shutdown_distributed
from gigpo.trainer.engines import ActorEngine, settings_from_config


def make_samples(n: int, vocab: int, seed: int = 0) -> list[TrainSample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p = int(torch.randint(200, 700, (1,), generator=g))
        r = int(torch.randint(8, 200, (1,), generator=g))
        out.append(TrainSample(torch.randint(3, vocab, (p,), generator=g).tolist(),
                               torch.randint(3, vocab, (r,), generator=g).tolist(), advantage=1.0))
    return out


@torch.no_grad()
def padded_log_probs(model, samples: list[TrainSample], budget: int, pad_id: int) -> tuple[list[torch.Tensor], float]:
    """Log-probs with right-padded batches in arrival order; returns them and the padding share."""
    batches, current = [], []
    for s in samples:
        longest = max([len(x) for x in current + [s]])
        if current and longest * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(s)
    batches.append(current)
    result, real, padded = [], 0, 0
    for batch in batches:
        width = max(len(s) for s in batch)
        ids = torch.full((len(batch), width), pad_id)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for k, s in enumerate(batch):
            seq = s.prompt_ids + s.response_ids
            ids[k, :len(seq)] = torch.tensor(seq)
            mask[k, :len(seq)] = 1
        real, padded = real + int(mask.sum()), padded + ids.numel()
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        for k, s in enumerate(batch):
            p, r = len(s.prompt_ids), len(s.response_ids)
            result.append(logp[k, p - 1:p - 1 + r].clone())
    return result, 1.0 - real / padded


def best_of(reps: int, fn):
    times, value = [], None
    for _ in range(reps):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--quick", action="store_true", help="one repetition instead of three")
    args = parser.parse_args()

    path = str(cached_local_model(args.preset))
    config = build_config({"model": {"path": path, "dtype": args.dtype},
                           "trainer": {"micro_token_budget": args.budget, "zero_stage": 2, "lr": 1e-6}})
    engine_s, loss_s = settings_from_config(config)
    engine_s = dataclasses.replace(engine_s, mini_batch_size=args.samples, mini_batches=None)
    actor = ActorEngine(path, engine_s, dataclasses.replace(loss_s, kl_coef=0.0))
    model = actor.hf_module()
    samples = make_samples(args.samples, model.config.vocab_size)
    tokens = sum(len(s) for s in samples)
    reps = 1 if args.quick else 3

    model.eval()
    auto = actor.layout
    timings = {}
    for layout in ("packed", "padded"):
        actor.layout = layout
        timings[layout], scored = best_of(reps, lambda: actor.compute_log_probs(samples))
        if layout == auto:
            ours = scored
    actor.layout = auto
    base_s, (base, pad_share) = best_of(reps, lambda: padded_log_probs(model, samples, args.budget,
                                                                       model.config.pad_token_id or 0))
    worst = max(float((a - b).abs().max()) for a, b in zip(ours, base))
    tolerance = 0.1 if args.dtype == "bf16" else 1e-3
    if worst > tolerance:
        raise SystemExit(f"gigpo and baseline log-probs differ by {worst} > {tolerance}: not comparable")
    for s, lp in zip(samples, ours):
        s.logp_old = lp
    update_s, metrics = best_of(1, lambda: actor.update(samples))
    print(f"preset={args.preset} dtype={args.dtype} samples={args.samples} budget={args.budget} layout={auto} "
          f"max_logp_diff={worst:.2e} micro_batches={metrics['perf/micro_batches']:.0f} "
          f"pad_share={metrics['perf/pad_share']:.2f} baseline_pad_share={pad_share:.2f}")
    print(f"tokens={tokens} packed_tok_s={tokens / timings['packed']:.0f} sorted_tok_s={tokens / timings['padded']:.0f} "
          f"baseline_tok_s={tokens / base_s:.0f} speedup={base_s / timings[auto]:.2f} update_tok_s={tokens / update_s:.0f}")
    shutdown_distributed()


if __name__ == "__main__":
    main()
