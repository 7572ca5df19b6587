"""One rank of every 2-rank case of tests/trainer/test_launch.py, in one DeepSpeed launch.

A launch costs the launcher's and each rank's imports and a process group (tens of seconds on 2 CPU cores), more
than the cases themselves, so the ranks run them one after the other, each into its own folder of OUT_DIR:

    zero2/       two_rank_worker: each rank holds its share, one ZeRO-2 update
    zero3_lora/  two_rank_worker: the same with LoRA adapters under ZeRO-3
    probe/       probe_follower_worker: ZeRO-3 sync check with the generator on rank 0 alone

    python two_rank_cases_worker.py MODEL_DIR OUT_DIR

Each case's engines are dropped before the next (a ZeRO-3 model left alive would make transformers load the
next model partitioned); every engine seeds itself (TrainingEngineSettings.seed), so a case's result does not
depend on the cases before it.
"""
from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import probe_follower_worker
import two_rank_worker

from gigpo.trainer.distributed import barrier, init_distributed, shutdown_distributed

CASES = {
    "zero2": lambda model, out: two_rank_worker.run(model, out),
    "zero3_lora": lambda model, out: two_rank_worker.run(model, out, 3, 8),
    "probe": lambda model, out: probe_follower_worker.run(model, out),
}


def main(model_dir: str, out_dir: str) -> None:
    init_distributed()
    for name, case in CASES.items():
        out = Path(out_dir, name)
        out.mkdir(parents=True, exist_ok=True)
        case(model_dir, str(out))
        gc.collect()
        barrier()
    shutdown_distributed()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
