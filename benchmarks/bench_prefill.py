"""HF generation's prefill three ways, on the rollouts of sokoban_tiny: every row prefilled in full
(`share_prefill=False`), each distinct prompt of a call once (`prompt_cache_bytes=0`), and prompts kept
across the calls of a rollout (the default). CPU seconds of this process at one thread, so the figure
holds on a loaded machine too. All three play the same seeds with the same weights, so they sample the
same episodes (the step counts printed agree). Between rollouts each generator gets its weights again
under a new version, as after a training step, which empties the prompt cache.

    PYTHONPATH=. python benchmarks/bench_prefill.py MODEL_DIR     # e.g. a run's warmup/hf

Iterations 2-6 count; the last line is the median of each and their ratios to the full prefill.
"""
import statistics as st
import sys
import time

import torch

from gigpo.config import load_config
from gigpo.infra.seeds import train_seeds
from gigpo.rollout.collect import rollout
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.trainer.setup import build_pool, build_prompt_fn, sampling

MODES = {"full prefill": dict(share_prefill=False), "within a call": dict(prompt_cache_bytes=0),
         "across calls": dict()}


def main() -> None:
    torch.set_num_threads(1)
    model = sys.argv[1]
    config = load_config("recipes/sokoban_tiny.yaml", [])
    pool = build_pool(config)
    gens = {mode: HFGenerator(model, dtype="fp32", max_batch_size=256, **kw) for mode, kw in MODES.items()}
    prompt_fn = build_prompt_fn(config, gens["full prefill"].tokenizer)
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    for it in range(1, 7):
        order = list(MODES) if it % 2 else list(reversed(MODES))
        for mode in order:
            gen = gens[mode]
            gen.update_weights(list(gen.model.named_parameters()), version=it)  # what a sync does to the cache
            t0 = time.process_time()
            r = rollout(pool, gen, prompt_fn, train_seeds(config, it), config.env.group_size,
                        sampling(config, evaluation=False, seed=it), config.rollout.max_prompt_tokens)
            seconds[mode].append(time.process_time() - t0)
            print(it, mode, round(seconds[mode][-1], 3), len(r.steps), flush=True)
    med = {mode: st.median(s[1:]) for mode, s in seconds.items()}
    base = med["full prefill"]
    print(", ".join(f"{mode} {m:.3f} s ({base / m:.2f}x)" for mode, m in med.items()))


if __name__ == "__main__":
    main()
