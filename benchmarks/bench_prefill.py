"""HF generation with and without the shared prefill (`HFGenerator(share_prefill=...)`), on the rollouts
of sokoban_tiny: CPU seconds of this process at one thread, so the figure holds on a loaded machine too.
Both generators play the same seeds, so they sample the same episodes (the step counts printed agree).

    PYTHONPATH=. python benchmarks/bench_prefill.py MODEL_DIR     # e.g. a run's warmup/hf

Iterations 2-6 count; the last line is the median of each and their ratio.
"""
import statistics as st
import sys
import time

import torch

from gigpo.config import load_config
from gigpo.rollout.collect import rollout
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.trainer.loop import build_pool, build_prompt_fn, sampling, train_seeds


def main() -> None:
    torch.set_num_threads(1)
    model = sys.argv[1]
    config = load_config("recipes/sokoban_tiny.yaml", [])
    pool = build_pool(config)
    gens = {flag: HFGenerator(model, dtype="fp32", max_batch_size=256, share_prefill=flag) for flag in (False, True)}
    prompt_fn = build_prompt_fn(config, gens[True].tokenizer)
    res = {False: [], True: []}
    for it in range(1, 7):
        for flag in (False, True) if it % 2 else (True, False):
            t0 = time.process_time()
            r = rollout(pool, gens[flag], prompt_fn, train_seeds(config, it), config.env.group_size,
                        sampling(config, evaluation=False, seed=it), config.rollout.max_prompt_tokens)
            res[flag].append(time.process_time() - t0)
            print(it, flag, round(res[flag][-1], 3), len(r.steps), flush=True)
    a, b = st.median(res[False][1:]), st.median(res[True][1:])
    print(f"full prefill {a:.3f} s, shared prefill {b:.3f} s, ratio {a/b:.2f}")

if __name__ == "__main__":
    main()
