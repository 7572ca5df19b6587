"""How much of its own demonstrations a supervised warm-up reproduces: the share of sampled (prompt, expert
answer) pairs whose every answer token is the model's teacher-forced argmax, after given warm-up steps.

The warm-up's loss cannot say this: part of it is on format tokens that are learned first, and a mean over
tokens hides whether whole actions come out right. A policy that scores 0% on the tasks it was shown (issue 55)
is either underfit (low here) or unable to act on what it fits (high here).

    OMP_NUM_THREADS=2 PYTHONPATH=. python benchmarks/warmup_fit.py --recipe recipes/alfworld_subset_smollm2.yaml --steps 30,60
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
import tempfile

import torch
from transformers import AutoTokenizer

from gigpo.config import load_config
from gigpo.envs.demos import collect_demonstrations
from gigpo.infra.seeds import demo_seeds, sft_warmup_seed
from gigpo.models.resolve import resolve_model_path
from gigpo.trainer.setup import build_pool, build_prompt_fn
from gigpo.trainer.sft_warmup import response_ids, supervised_warmup


def exact_match(model, pairs: list[tuple[list[int], list[int]]], pad: int, bf16: bool, batch: int = 8) -> float:
    """Share of pairs whose whole answer is the teacher-forced argmax, token by token."""
    model.eval()
    hits = 0
    with torch.no_grad():
        for i in range(0, len(pairs), batch):
            chunk = pairs[i:i + batch]
            width = max(len(p) + len(r) for p, r in chunk)
            ids = torch.full((len(chunk), width), pad)
            attention = torch.zeros(len(chunk), width, dtype=torch.long)
            for k, (p, r) in enumerate(chunk):
                ids[k, :len(p) + len(r)] = torch.tensor(p + r)
                attention[k, :len(p) + len(r)] = 1
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=ids, attention_mask=attention).logits
            for k, (p, r) in enumerate(chunk):
                hits += logits[k, len(p) - 1:len(p) + len(r) - 1].argmax(-1).tolist() == r
    model.train()
    return hits / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--steps", default="30,60", help="warm-up steps at which to measure")
    parser.add_argument("--sample", type=int, default=240, help="demonstrations measured (a fixed random sample)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(args.recipe, [*args.overrides, "logging.progress=false"])
    t, e = config.trainer, config.env
    path = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    seed = sft_warmup_seed(t)
    with build_pool(config) as pool:  # the recipe's own demonstrations, as the warm-up makes them
        demos = collect_demonstrations(pool, demo_seeds(e, seed, t.sft_rooms), explore=1.0 - t.sft_expert_share, seed=seed)
    pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(build_prompt_fn(config, tokenizer)([d.view for d in demos]), demos)]
    sample = random.Random(0).sample(pairs, min(args.sample, len(pairs)))
    checkpoints = sorted(int(s) for s in args.steps.split(","))
    print(f"{len(pairs)} demonstrations; exact match measured on {len(sample)} of them", flush=True)
    start = time.time()

    def measure(step: int, model) -> None:
        if step in checkpoints:
            share = exact_match(model, sample, tokenizer.pad_token_id, config.model.dtype == "bf16")
            print(f"step {step}: whole-answer teacher-forced exact match {share:.1%} "
                  f"(+- {(share * (1 - share) / len(sample)) ** 0.5:.1%}; {time.time() - start:.0f} s)", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        supervised_warmup(path, Path(tmp), pairs, max(checkpoints), t.sft_lr, t.sft_batch_size, seed, progress=False,
                          dtype=config.model.dtype, after_step=measure, action_share=t.sft_action_share,
                          micro_tokens=t.sft_micro_tokens)


if __name__ == "__main__":
    main()
