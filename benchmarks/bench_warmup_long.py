"""Seconds per supervised warm-up step on ALFWorld's long prompts: one padded forward against micro-batches.

    PYTHONPATH=. python benchmarks/bench_warmup_long.py                      # tiny model, history 1
    PYTHONPATH=. python benchmarks/bench_warmup_long.py --history 0 --budgets 4096,8192,16384

The pairs are real: the recipe's env (recipes/alfworld_tiny.yaml) on the package's sample tasks, played
by the expert with 30% random moves, prompts built by the recipe's prompt builder. Each way trains its
own copy of the same fresh model on the same batches for `--steps` steps, the ways taking turns on each batch:
- old: the whole batch right-padded to its longest row, attention masked, the LM head over every position
  (`batch_loss_backward(..., micro_tokens=None)`, the warm-up before issue 38);
- new: rows sorted by length, cut into micro-batches of at most `budget` padded tokens, the LM head only
  where an answer token is predicted (`trainer.sft_micro_tokens`).
The cores may be shared: the load average is printed at the start and end, the medians and ratios come from one run.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gigpo.config import load_config
from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.envs.demos import collect_demonstrations
from gigpo.models.resolve import resolve_model_path
from gigpo.trainer.setup import build_pool, build_prompt_fn
from gigpo.trainer.sft_warmup import AnswerWeights, batch_loss_backward, micro_batches, response_ids


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


class Trainer:
    """A fresh model (the same initial weights for every way) with its AdamW, stepping one way."""

    def __init__(self, model_path: str, pad: int, weights_of, budget):
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.pad, self.weights_of, self.budget = pad, weights_of, budget

    def step(self, batch) -> float:
        """Wall seconds of forward + backward + AdamW step on `batch`."""
        start = time.perf_counter()
        self.optimizer.zero_grad()
        batch_loss_backward(self.model, batch, self.pad, self.weights_of, self.budget, torch.device("cpu"))
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/alfworld_tiny.yaml")
    parser.add_argument("--history", type=int, default=1, help="env.history_length: 1 gives prompts of ~300-1000 tokens")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128, help="rows per step (trainer.sft_batch_size)")
    parser.add_argument("--steps", type=int, default=3, help="steps per way (the median is reported)")
    parser.add_argument("--budgets", default="8192", help="new way's micro-batch budgets, comma-separated")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, 2 here); on cores "
                        "shared with other work one thread can be faster: each op waits for every thread")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
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
    budgets = [None, *(int(b) for b in args.budgets.split(","))]
    trainers = [Trainer(model_path, pad, weights_of, b) for b in budgets]
    times: list[list[float]] = [[] for _ in budgets]
    print(f"start: {uptime()}", flush=True)
    for batch in batches:  # the ways take turns on each batch, so a change of load hits all of them alike
        for k, trainer in enumerate(trainers):
            times[k].append(trainer.step(batch))
    print(f"end:   {uptime()}", flush=True)
    old = statistics.median(times[0])
    print(f"old (one padded forward, head everywhere): median {old:.2f} s/step over {len(batches)} steps")
    for budget, spent in zip(budgets[1:], times[1:]):
        runs = [micro_batches([len(p) + len(r) for p, r in b], budget) for b in batches]
        new = statistics.median(spent)
        print(f"new (budget {budget}, {sum(map(len, runs)) / len(runs):.1f} micro-batches/step): median {new:.2f} s/step, "
              f"{old / new:.2f}x faster")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
