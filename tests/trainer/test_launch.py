"""Two ranks through DeepSpeed's launcher: the one-controller design, ZeRO-2, ZeRO-3 with LoRA and the ZeRO-3 sync
check, on CPU (gloo). One launch runs every 2-rank case (two_rank_cases_worker.py); each test reads its case."""
from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from gigpo.trainer.distributed import relaunch_command, relaunch_if_needed
from gigpo.trainer.engines import ActorEngine
from support.tolerance import metric_rel, relative_update_gap, samples_close

WORKER = Path(__file__).parent / "two_rank_cases_worker.py"


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory) -> Path:
    """Every case of two_rank_cases_worker.py on 2 ranks in one DeepSpeed launch (one thread each): the folder
    with each case's outputs (the tests below only read them)."""
    out_dir = tmp_path_factory.mktemp("two_ranks")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    env.pop("WORLD_SIZE", None)
    cmd = relaunch_command([str(tiny_model_dir), str(out_dir)], nprocs=2, script=str(WORKER))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out_dir


def result_of(two_ranks: Path, case: str) -> dict:
    """Rank 0's result.json of one case."""
    return json.loads((two_ranks / case / "result.json").read_text())


def assert_updated_like_one_rank(mine: list[torch.Tensor], theirs: list[list[float]]) -> None:
    """Log-probs after one Adam step on one rank (mine) and on two (theirs). Weights whose gradient is near 0 may
    differ by up to 2 lr from float noise (support.tolerance.relative_update_gap); their effect on log-probs is kept
    below 2e-3 here, while the update itself moves them by more (asserted where it matters)."""
    for ours, two in zip(mine, theirs, strict=True):
        torch.testing.assert_close(ours, torch.tensor(two), atol=2e-3, rtol=0)


def test_zero3_sync_check_with_a_generator_on_rank_0_alone(two_ranks):
    """ZeRO-3 on 2 ranks, the generator on rank 0 only (the server layout): rank 1 runs the probe's collective
    forwards, so rank 0's check completes, passes a good sync and stops a bad one."""
    result = result_of(two_ranks, "probe")
    assert 0.0 <= result["good"] <= 2e-3  # fp32: the generator scores the probe as the trainer does
    assert "weight sync to version 2 failed verification" in result["error"]


def test_two_ranks_each_holding_its_share_update_as_one_rank_holding_all(tiny_model_dir, two_ranks):
    """Rank 0 holds 4 samples, rank 1 the other 2 (half the tokens): one ZeRO-2 optimizer step over both
    shares equals one rank's step over all 6. A loss denominator counted per rank weighs rank 1's tokens
    twice as much: another gradient, so the grad norm differs and most weight updates with it."""
    import two_rank_worker as worker  # same settings and batch, run here on one rank
    from test_engines import UPDATE_GAP

    result = result_of(two_ranks, "zero2")
    assert result["world_size"] == 2
    assert len(set(result["weight_digests"])) == 1, "ranks disagree on the weights after the update"
    assert result["rng_files"] == ["rank0.pt", "rank1.pt"]
    assert Path(result["checkpoint"], "hf", "model.safetensors").is_file()

    # the same update on one rank holding every sample: the same gradient, log-probs and weights
    actor = worker.ActorEngine(str(tiny_model_dir), worker.SETTINGS, worker.LOSS)
    start = {name: w.clone() for name, w in actor.named_weights()}
    samples = worker.make_samples()
    before = actor.compute_log_probs(samples)
    for s, lp, adv in zip(samples, before, worker.ADVANTAGES):
        s.logp_old, s.advantage = lp, adv
    metrics = actor.update(samples)
    after = actor.compute_log_probs(samples)
    config = actor.hf_module().config  # two ranks sum the gradient in another order: reorder bounds
    for mine, theirs in zip(before, result["before"]):
        torch.testing.assert_close(mine, torch.tensor(theirs), **samples_close(config, samples))
    rel = metric_rel(config, samples)
    assert result["metrics"]["actor/grad_norm"] == pytest.approx(metrics["actor/grad_norm"], rel=rel)
    assert result["metrics"]["loss/policy"] == pytest.approx(metrics["loss/policy"], rel=rel,
                                                              abs=samples_close(config, samples)["atol"])
    assert_updated_like_one_rank(after, result["after"])
    theirs = torch.load(two_ranks / "zero2" / "weights.pt")
    mine = dict(actor.named_weights())
    assert mine.keys() == theirs.keys()
    for name in mine:  # float noise moves few of Adam's near-zero-gradient weights; a wrong gradient moves most
        assert relative_update_gap(theirs[name], mine[name], start[name]) < UPDATE_GAP, name


def test_two_rank_zero3_lora_update_equals_the_one_rank_update(tiny_model_dir, two_ranks):
    """ZeRO-3 partitions the frozen base and the adapters over 2 CPU ranks; the update is the one-rank one."""
    import two_rank_worker as worker

    result = result_of(two_ranks, "zero3_lora")
    assert result["world_size"] == 2 and len(set(result["weight_digests"])) == 1
    assert Path(result["checkpoint"], "adapter", "adapter_model.safetensors").is_file()

    actor = ActorEngine(str(tiny_model_dir), worker.settings(3, 8), worker.LOSS)
    samples = worker.make_samples()
    for s, lp, adv in zip(samples, actor.compute_log_probs(samples), worker.ADVANTAGES):
        s.logp_old, s.advantage = lp, adv
    metrics = actor.update(samples)
    rel = metric_rel(actor.hf_module().config, samples)  # two ranks sum the gradient in another order
    assert result["metrics"]["actor/grad_norm"] == pytest.approx(metrics["actor/grad_norm"], rel=rel)
    assert_updated_like_one_rank(actor.compute_log_probs(samples), result["after"])
    assert max(abs(a - b) for mine, theirs in zip(actor.compute_log_probs(samples), result["before"])
               for a, b in zip(mine.tolist(), theirs)) > 1e-4, "the LoRA update did not move the log-probs"


def test_relaunch_only_when_more_than_one_rank_and_not_yet_launched(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert relaunch_if_needed(["train", "r.yaml"], nprocs=1) is None
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert relaunch_if_needed(["train", "r.yaml"], nprocs=2) is None
    cmd = relaunch_command(["train", "r.yaml"], nprocs=2, master_port=29511)
    assert cmd[-4:] == ["--module", "gigpo.cli", "train", "r.yaml"]
    assert "--no_local_rank" in cmd and "--master_port=29511" in cmd
    # one machine: DeepSpeed's per-node launcher itself, given the world its runner would give it for --num_gpus 2
    assert cmd[cmd.index("-m") + 1] == "deepspeed.launcher.launch"
    world = next(arg.split("=", 1)[1] for arg in cmd if arg.startswith("--world_info="))
    assert json.loads(base64.urlsafe_b64decode(world)) == {"localhost": [0, 1]}
    from deepspeed.launcher.runner import encode_world_info
    assert world == encode_world_info({"localhost": [0, 1]})
    several = relaunch_command(["train", "r.yaml"], nprocs=2, hostfile="hosts", master_port=29511)
    assert several[several.index("-m") + 1] == "deepspeed.launcher.runner" and "hosts" in several


def test_relaunch_runs_the_cli_module_as_ranks(tmp_path, monkeypatch, capfd):
    """`gigpo train` relaunches itself this way; `gigpo config` stands in for it (no engines, fast)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model:\n  init: tiny\ntrainer:\n  nprocs: 2\n")
    assert relaunch_if_needed(["config", str(recipe), "trainer.lr=3.5e-7"], nprocs=2) == 0
    out = capfd.readouterr().out
    assert out.count("lr: 3.5e-07") == 2  # each rank printed the resolved recipe


def test_a_lost_rank_is_explained_and_other_errors_are_not():
    from gigpo.trainer.distributed import lost_rank_message

    gloo = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.77.1.1]:14737. "
                        "This is typically caused by a remote worker crashing.")
    message = lost_rank_message(gloo)
    assert message is not None and "lost the connection to another rank at 10.77.1.1" in message
    assert "--resume" in message and "Connection closed by peer" in message
    assert lost_rank_message(RuntimeError("CUDA out of memory")) is None
