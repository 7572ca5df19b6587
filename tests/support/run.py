"""Shared by the end-to-end trainer tests: a shrunk Sokoban run and a `gigpo` subprocess runner."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from support.zygote import run_cli, server_pid

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT", "CROSS_RANK", "CROSS_SIZE")


def clean_env() -> dict[str, str]:
    """This process's environment without the rank variables that in-process engine tests set, so a
    child `gigpo train` starts as a fresh single process instead of joining a stale process group."""
    return {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}

REPO = Path(__file__).resolve().parents[2]
ENGINE_CORE_IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""Environment for a `gigpo` command or generation server whose test is not about vLLM's engine core being a process
of its own: the core runs inside the command's process (gigpo.rollout.vllm_backend.core_in_process_asked), sparing
the EngineCore and worker processes that each import vLLM first (~28 s of CPU a start, test_lora_sync's server
here). Never for an engine in the pytest process itself: an in-process core joins that process's torch.distributed
and vLLM state. Kept out of the tests about the process boundary (engine processes stopped by SIGTERM, orphans, a
killed or restarted server) and of the ones that prove the separate core works (tests/rollout/test_vllm.py,
test_server.py)."""


@contextmanager
def servers_start_with_engine_core_in_process() -> Iterator[None]:
    """Generation servers started inside this block (they take this process's environment) run their engine core
    inside the server's process, as ENGINE_CORE_IN_PROCESS does for a command; this process's environment is
    restored after."""
    import pytest

    with pytest.MonkeyPatch.context() as env:
        for key, value in ENGINE_CORE_IN_PROCESS.items():
            env.setenv(key, value)
        yield


SMALL = ["env.num_groups=2", "env.group_size=2", "env.max_steps=3", "env.eval_episodes=2",
         "env.workers=1", "trainer.sft_steps=0", "trainer.micro_token_budget=2048", "trainer.mini_batch_size=64",
         "logging.wandb_mode=disabled", "logging.progress=false", "rollout.max_new_tokens=8", "trainer.warmup_steps=2"]
#: trainer.warmup_steps=2 rather than the default 20: these runs take about one optimizer step an iteration, so
#: under 20 their weights would hardly move in the few iterations a test runs (resume checks need them to move).
#: Still a warm-up, so a resume from checkpoint 1 lands mid-warm-up and only a restored lr schedule repeats step 2.
#: A supervised warm-up short enough for tests (~5 s, cached across runs with the same settings) that leaves a
#: policy which writes valid moves most of the time and differs between episodes, so returns differ within
#: groups, advantages are non-zero and the update moves the weights (an untrained model never acts).
#: env.max_steps is part of the warm-up's cache key: the tests that warm up all use 4, so they share one.
#: The plain token-mean loss (sft_action_share=null) is what these settings were tuned with: with the recipe's
#: balanced loss the same 40 steps leave a policy whose groups often all win or all lose, so a dynamic-sampling
#: iteration can end without an update.
WARM = ["trainer.sft_steps=40", "trainer.sft_batch_size=32", "trainer.sft_rooms=200", "trainer.sft_lr=3e-3",
        "trainer.sft_action_share=null", "env.max_steps=4"]
REQUIRED_KEYS = {"rollout/success", "rollout/return", "rollout/episode_length", "rollout/invalid_action_rate",
                 "rollout/tokens_generated", "rollout/env_steps_total", "adv/advantage_mean", "adv/step_groups",
                 "loss/entropy", "loss/clip_frac", "actor/grad_norm", "time/rollout", "time/env",
                 "time/logprobs", "time/advantage", "time/update", "time/sync", "time/iteration", "perf/peak_rss_gb"}


def train(run_dir: Path, *overrides: str, resume: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    args = ["train", "recipes/sokoban_tiny.yaml", *SMALL, f"trainer.run_dir={run_dir}", *overrides] + (
        ["--resume"] if resume else [])
    proc = run_cli(args, cwd=REPO, env=clean_env(), timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def metrics_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (children inherit it, so orphans keep it; a zombie's
    environment reads empty). Blind to processes that retitle themselves, vLLM's among them: see `processes_in`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == server_pid():  # the test zygote outlives every test
            continue
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def processes_in(directory: Path) -> dict[int, str]:
    """Live processes whose working directory is `directory`, with their command lines. Children inherit the
    working directory and orphans keep it. An environment marker does not do: vLLM's engine core and workers
    retitle themselves (setproctitle), which overwrites the environment block that /proc shows."""
    found = {}
    target = os.path.realpath(directory)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == target:
                found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
        except OSError:
            continue
    return found


def allreduce_buffers_left(launch_output: str) -> set[Path]:
    """The DeepSpeed CPU all-reduce buffers (64 MiB per rank in RAM-backed /dev/shm) still present of the
    two-rank runs whose `gigpo train` output is `launch_output`, found by the master port that `gigpo train` names
    when it starts the ranks. By port, not by what appeared in /dev/shm meanwhile: under `make test`'s workers
    another test's ranks come and go in the same window (CI once blamed a test for another run's buffers)."""
    from gigpo.trainer.distributed import LAUNCH_ADDR

    ports = re.findall(rf"ranks with DeepSpeed's launcher, master {re.escape(LAUNCH_ADDR)}:(\d+)", launch_output)
    assert ports, f"no launch line in the output:\n{launch_output[-3000:]}"
    return {path for port in ports
            for path in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{LAUNCH_ADDR}_{port}_*")}


def metrics_so_far(run_dir: Path) -> list[dict]:
    """The complete metrics lines of a run still being written: none while the file is missing or empty,
    and never a line caught half-written (polling loops read it between a write's start and its newline)."""
    path = run_dir / "metrics.jsonl"
    text = path.read_text() if path.is_file() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def train_and_kill_in_iteration_3(run_dir: Path, *overrides: str) -> None:
    """Start `gigpo train` and SIGKILL its whole process group once iteration 3 has begun: iteration 2's
    metrics line is written after its checkpoint, so checkpoint 2 is complete and 3 is in flight."""
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SMALL, f"trainer.run_dir={run_dir}",
           *overrides]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=clean_env())
    deadline = time.time() + 300
    try:
        while time.time() < deadline:
            if any(r["iteration"] == 2 for r in metrics_so_far(run_dir)):
                break
            assert proc.poll() is None, "training exited before iteration 3"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert [r["iteration"] for r in metrics_of(run_dir)] == [0, 1, 2]


def gigpo(*args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    proc = run_cli(list(args), cwd=REPO, env={**clean_env(), **(env or {})}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def hf_weights(run_dir: Path, iteration: int) -> dict:
    """The actor's weights saved with checkpoint `iteration` (the HF copy), name -> fp32 tensor."""
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / str(iteration) / "hf" / "model.safetensors"))


def assert_same_update(got: dict, want: dict, keys: tuple[str, ...], rel: float = 1e-5) -> None:
    """The logged update statistics of two runs' same iteration agree. Same seeds, same weights and the
    same fp32 CPU kernels in one process layout: only summation order could differ, so a relative 1e-5
    (~100 fp32 epsilons) is generous while a restored-wrong optimizer state or weight changes them at 1e-2.
    The absolute 1e-6 covers statistics that are zero up to rounding (the first epoch's policy loss is
    -mean(advantage) of normalised advantages: ~1e-8 from sums of ~100 terms of size ~1)."""
    import pytest

    for key in keys:
        assert key in got and key in want, f"{key} not logged"
        assert got[key] == pytest.approx(want[key], rel=rel, abs=1e-6), (key, got[key], want[key])


def cut_back(run_dir: Path, to_dir: Path, iteration: int) -> Path:
    """A copy of a finished run as a kill after checkpoint `iteration` leaves it: its later checkpoints,
    metrics lines and done.json removed, ready for `--resume`."""
    import shutil

    shutil.copytree(run_dir, to_dir)
    for ckpt in (to_dir / "checkpoints").iterdir():
        if ckpt.name.isdigit() and int(ckpt.name) > iteration:
            shutil.rmtree(ckpt)
    (to_dir / "done.json").unlink(missing_ok=True)
    kept = [line for line in (to_dir / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["iteration"] <= iteration]
    (to_dir / "metrics.jsonl").write_text("\n".join(kept) + "\n")
    return to_dir


def assert_same_weights(run_dir: Path, reference: Path, iteration: int, resumed_from: int) -> None:
    """Checkpoint `iteration` of a resumed run holds the uninterrupted run's weights, and those moved since
    checkpoint `resumed_from` (else the comparison would prove nothing). fp32 weights of size ~0.1-1: 1e-6
    is ~10 epsilons of rounding, while a wrong weight or Adam moment moves them by ~lr (1e-4 and more)."""
    resumed, straight, start = hf_weights(run_dir, iteration), hf_weights(reference, iteration), hf_weights(reference, resumed_from)
    moved = max((straight[k] - start[k]).abs().max().item() for k in straight)
    assert moved > 1e-4, f"the weights moved by only {moved:.1e} after checkpoint {resumed_from}"
    assert resumed.keys() == straight.keys()
    for name, tensor in straight.items():
        assert (resumed[name] - tensor).abs().max().item() <= 1e-6, name


def assert_generator_holds_the_trainers_weights(record: dict, model_dir: Path) -> None:
    """In `record`'s iteration of a `train` run the generator sampled from the trainer's weights: the largest
    gap between the log-probs it returned for its tokens and the trainer's recomputation of them
    (rollout/logp_gap_max) is within what two fp32 kernels' summation orders allow over the longest sequence
    a step can hold (support.tolerance). A generator left at other weights (a resume that skipped the sync
    to the checkpoint) is off by what the updates since then changed, orders of magnitude more."""
    from transformers import AutoConfig

    from gigpo.config import load_config
    from support.tolerance import logprob_tolerance

    rollout = load_config(REPO / "recipes" / "sokoban_tiny.yaml", SMALL).rollout
    bound = logprob_tolerance(AutoConfig.from_pretrained(model_dir), rollout.max_prompt_tokens + rollout.max_new_tokens)
    assert record["rollout/logp_gap_max"] <= bound, (record["rollout/logp_gap_max"], bound)
