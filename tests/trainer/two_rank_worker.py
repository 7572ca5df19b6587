"""One rank of the 2-rank update tests (tests/trainer/test_launch.py, through two_rank_cases_worker.py), started by
DeepSpeed's launcher.

Each rank holds only its share of the batch, as the loop's ranks hold their own task groups: rank 0 the
first `SPLIT` samples, rank 1 the rest (half the response tokens of rank 0's, so a loss denominator taken
per rank would weigh the ranks' samples differently). Both ranks compute their samples' log-probs, update
together (ZeRO-2; an optional third argument picks another stage, a fourth LoRA rank turns on adapters),
compare their weights and save a checkpoint together. Rank 0 writes result.json (log-probs of every
sample, in batch order) and weights.pt (the full weights after the update).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import torch

from gigpo.trainer.checkpoint import latest_checkpoint, save_checkpoint
from gigpo.trainer.distributed import all_gather_objects, init_distributed, rank_info, shutdown_distributed
from gigpo.trainer.engines import ActorEngine

sys.path.insert(0, str(Path(__file__).parent))
from trainer_helpers import engine_settings, loss_settings, make_samples  # noqa: E402

SETTINGS = engine_settings(zero_stage=2, micro_token_budget=48, mini_batch_size=None, mini_batches=1, ppo_epochs=1,
                          lr=1e-3, grad_clip=1e6)
LOSS = loss_settings(kl_coef=0.0, entropy_coef=0.0)
ADVANTAGES = [1.0, 0.0, 0.5, -1.0, 0.0, -0.5]
SPLIT = 4
"""Rank 0 holds samples[:SPLIT] (28 response tokens), rank 1 the rest (14)."""


def settings(zero_stage: int = SETTINGS.zero_stage, lora_rank: int = 0):
    from gigpo.trainer.lora import LoraSettings

    lora = LoraSettings(rank=lora_rank, alpha=16.0, dropout=0.0, target_modules=("all-linear",)) if lora_rank else None
    return dataclasses.replace(SETTINGS, zero_stage=zero_stage, lora=lora)


def main(model_dir: str, out_dir: str, zero_stage: int = SETTINGS.zero_stage, lora_rank: int = 0) -> None:
    init_distributed()
    run(model_dir, out_dir, zero_stage, lora_rank)
    shutdown_distributed()


def run(model_dir: str, out_dir: str, zero_stage: int = SETTINGS.zero_stage, lora_rank: int = 0) -> None:
    """The update and checkpoint on ranks already joined (two_rank_cases_worker.py runs it beside other cases)."""
    info = rank_info()
    share = slice(0, SPLIT) if info.rank == 0 else slice(SPLIT, None)
    samples = make_samples()[share]
    actor = ActorEngine(model_dir, settings(zero_stage, lora_rank), LOSS)
    before = actor.compute_log_probs(samples)
    for s, lp, adv in zip(samples, before, ADVANTAGES[share]):
        s.logp_old, s.advantage = lp, adv
    metrics = actor.update(samples)
    after = actor.compute_log_probs(samples)
    digest, weights = hashlib.sha256(), {}
    for name, tensor in actor.named_weights():
        digest.update(name.encode() + tensor.numpy().tobytes())
        weights[name] = tensor
    digests = all_gather_objects(digest.hexdigest())
    # the log-probs of every sample, in batch order: gathered here for the test only
    before, after = ([t for part in all_gather_objects(x) for t in part] for x in (before, after))
    save_checkpoint(out_dir, 1, actor, loop_state={"world": info.world_size})
    if info.is_main:
        torch.save(weights, Path(out_dir, "weights.pt"))
        ckpt = latest_checkpoint(out_dir)
        Path(out_dir, "result.json").write_text(json.dumps({
            "world_size": info.world_size, "metrics": metrics, "weight_digests": digests,
            "before": [t.tolist() for t in before], "after": [t.tolist() for t in after],
            "checkpoint": str(ckpt), "rng_files": sorted(p.name for p in (ckpt / "rng").iterdir())}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))
