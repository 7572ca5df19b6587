"""One rank of the ZeRO-3 sync-check test (tests/trainer/test_launch.py, through two_rank_cases_worker.py), started
by DeepSpeed's launcher.

Rank 0 alone holds a generator, as with generation servers; rank 1 holds none. Under ZeRO-3 the probe's
trainer forward gathers every layer from both ranks, so rank 1 must run it too (`ProbeFollower`): without it
rank 0's check waits forever. Rank 0 then writes the gap of a good sync and the error of a bad one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from gigpo.config import build_config
from gigpo.rollout.weight_sync import sync_weights
from gigpo.rollout.weight_sync.verify import ProbeFollower, SyncMismatchError, SyncVerifier
from gigpo.trainer.distributed import init_distributed, rank_info, shutdown_distributed
from gigpo.trainer.engines import ActorEngine, settings_from_config
from gigpo.trainer.setup import build_generator, build_verifier


def main(model_dir: str, out_dir: str) -> None:
    init_distributed()
    run(model_dir, out_dir)
    shutdown_distributed()


def run(model_dir: str, out_dir: str) -> None:
    """The checks on ranks already joined (two_rank_cases_worker.py runs it beside other cases)."""
    info = rank_info()
    config = build_config({"model": {"path": model_dir, "dtype": "fp32"}, "rollout": {"backend": "hf", "verify_sync": True},
                           "trainer": {"zero_stage": 3, "nprocs": 2, "micro_token_budget": 512}})
    actor = ActorEngine(model_dir, *settings_from_config(config))
    generator = build_generator(config, model_dir) if info.is_main else None
    verifier = build_verifier(config, generator, actor.hf_module().config.vocab_size, info.world_size)
    kind = type(verifier).__name__
    assert kind == ("SyncVerifier" if info.is_main else "ProbeFollower"), kind
    good = sync_weights(generator, actor.hf_module(), 1, verifier, actor.named_weights())

    def scaled(named):  # a sync that delivers wrong weights: every tensor scaled
        for name, tensor in named:
            yield name, tensor * 1.5

    error = ""
    try:
        sync_weights(generator, actor.hf_module(), 2, verifier, scaled(actor.named_weights()))
    except SyncMismatchError as exc:
        error = str(exc)
    if info.is_main:
        Path(out_dir, "result.json").write_text(json.dumps({"good": good, "error": error}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
