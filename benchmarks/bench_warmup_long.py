"""Seconds per supervised warm-up step on ALFWorld's long prompts: one padded forward against micro-batches.

    PYTHONPATH=. python benchmarks/bench_warmup_long.py                      # tiny model, history 1
    PYTHONPATH=. python benchmarks/bench_warmup_long.py --history 0 --budgets 4096,8192,16384

The pairs are real: the recipe's env (recipes/alfworld_tiny.yaml) on the package's sample tasks, played
by the expert with 30% random moves, prompts built by the recipe's prompt builder. Each way trains the
same fresh model on the same batches for `--steps` steps:
- old: the whole batch right-padded to its longest row, attention masked, the LM head over every position
  (`batch_loss_backward(..., micro_tokens=None)`, the warm-up before issue 38);
- new: rows sorted by length, cut into micro-batches of at most `budget` padded tokens, the LM head only
  where an answer token is predicted (`trainer.sft_micro_tokens`).
The cores may be shared: the load average is printed beside each figure, and the ratio comes from one run.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gigpo.config import load_config
from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.envs.demos import collect_demonstrations
from gigpo.models.resolve import resolve_model_path
from gigpo.trainer.setup import build_pool, build_prompt_fn
from gigpo.trainer.warmup import AnswerWeights, batch_loss_backward, micro_batches, response_ids


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def seconds_per_step(model_path: str, batches, pad: int, weights_of, budget) -> float:
    """Mean wall seconds of forward + backward + AdamW step over `batches`, from the same initial weights."""
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    for batch in batches:
        optimizer.zero_grad()
        batch_loss_backward(model, batch, pad, weights_of, budget, torch.device("cpu"))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return (time.perf_counter() - start) / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/alfworld_tiny.yaml")
    parser.add_argument("--history", type=int, default=1, help="env.history_length: 1 gives prompts of ~300-1000 tokens")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128, help="rows per step (trainer.sft_batch_size)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--budgets", default="8192", help="new way's micro-batch budgets, comma-separated")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(args.recipe, [f"env.kwargs.data_path={SAMPLE_TASKS_DIR}", f"env.history_length={args.history}",
                                       "env.workers=2", *args.overrides])
    model_path = str(resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    with build_pool(config) as pool:
        demos = collect_demonstrations(pool, list(range(args.episodes)), explore=0.3, seed=0)
    prompts = build_prompt_fn(config, tokenizer)([d.view for d in demos])
    pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompts, demos)]
    rng = random.Random(0)
    batches = [[pairs[rng.randrange(len(pairs))] for _ in range(args.batch)] for _ in range(args.steps)]
    lengths = sorted(len(p) + len(r) for p, r in pairs)
    real = sum(len(p) + len(r) for b in batches for p, r in b)
    padded = sum(len(b) * max(len(p) + len(r) for p, r in b) for b in batches)
    print(f"{len(pairs)} pairs from {args.episodes} episodes, history {args.history}: tokens per row min "
          f"{lengths[0]}, median {lengths[len(lengths) // 2]}, max {lengths[-1]}; one padded batch is "
          f"{100 * (1 - real / padded):.0f}% padding; torch threads {torch.get_num_threads()}", flush=True)
    weights_of = AnswerWeights(tokenizer, config.trainer.sft_action_share) if config.trainer.sft_action_share is not None else None
    pad = tokenizer.pad_token_id
    print(f"before old: {uptime()}", flush=True)
    old = seconds_per_step(model_path, batches, pad, weights_of, None)
    print(f"old (one padded forward, head everywhere): {old:.2f} s/step   {uptime()}", flush=True)
    for budget in (int(b) for b in args.budgets.split(",")):
        runs = [micro_batches([len(p) + len(r) for p, r in b], budget) for b in batches]
        new = seconds_per_step(model_path, batches, pad, weights_of, budget)
        print(f"new (budget {budget}, {sum(map(len, runs)) / len(runs):.1f} micro-batches/step): {new:.2f} s/step, "
              f"{old / new:.2f}x faster   {uptime()}", flush=True)
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
