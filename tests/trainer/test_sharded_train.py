"""`gigpo train` with two ranks, each playing its share of the task groups and evaluation tasks with its own
hf generator and env workers: the same episodes, rows and advantages as one rank playing them all."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.run import WARM, metrics_of, train

# three groups split two and one, so the shares differ in size
COMMON = [*WARM, "env.num_groups=3", "env.group_size=4", "env.eval_episodes=3", "trainer.iterations=1",
          "logging.rollouts_every=1", "trainer.zero_stage=2", "model.dtype=fp32"]
BACKENDS = {
    # greedy: a sampled hf turn is seeded as a whole call, so its draws depend on which rows share the call
    "hf": ["rollout.backend=hf", "rollout.temperature=0"],
    # sampled: async turns seed each request by (seed, trajectory, step), whichever rank plays it
    "vllm": ["rollout.backend=vllm", "rollout.turns=async", "rollout.temperature=1"],
}
SAME = ("rollout/", "adv/", "eval/")
"""Metric families that depend on the episodes alone (not on timing or on the update's summation order)."""


def records(run: Path, name: str) -> list[dict]:
    lines = [json.loads(line) for line in gzip.open(run / "records" / f"{name}.jsonl.gz", "rt")]
    return [line for line in lines if line.get("kind") != "header"]


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_two_ranks_play_the_groups_rows_and_advantages_of_one_rank(tmp_path, backend):
    one, two = tmp_path / "one", tmp_path / "two"
    train(one, *COMMON, *BACKENDS[backend])
    proc = train(two, *COMMON, *BACKENDS[backend], "trainer.nprocs=2")
    for rank in range(2):  # equality alone would hold if rank 0 still played every group
        assert f"gigpo: rank {rank} plays share {rank + 1} of 2 of every rollout and evaluation" in proc.stdout
    names = sorted(p.name.removesuffix(".jsonl.gz") for p in (one / "records").glob("*.jsonl.gz"))
    assert sorted(p.name.removesuffix(".jsonl.gz") for p in (two / "records").glob("*.jsonl.gz")) == names
    assert len(names) == 3  # evaluation before training, the update's episodes, the final evaluation
    for name in names:
        mine, theirs = records(two, name), records(one, name)
        assert mine == theirs, f"record {name} differs"
    train_record = records(two, next(n for n in names if "train" in n))
    assert sorted({t["group"] for t in train_record}) == [0, 1, 2]  # rank 1's group among them, with its global id
    assert any(step["adv"] for t in train_record for step in t["steps"])  # advantages with a signal were compared
    got, want = metrics_of(two), metrics_of(one)
    assert [r["iteration"] for r in got] == [r["iteration"] for r in want] == [0, 1]
    for mine, theirs in zip(got, want):
        keys = {k for k in theirs if k.startswith(SAME)} - {"rollout/logp_gap_mean", "rollout/logp_gap_max"}
        assert keys and set(mine) >= keys
        assert {k: mine[k] for k in keys} == pytest.approx({k: theirs[k] for k in keys}, rel=1e-9, abs=1e-12)
