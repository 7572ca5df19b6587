"""SIGTERM (a `kill`, a scheduler's preemption) and Ctrl-C (SIGINT) stop `gigpo compare` and its `gigpo train`
cleanly: both signals take one path (gigpo.infra.stopping), so the compare test sends SIGINT and the two-rank test
SIGTERM.

Under the default action a killed `gigpo train` left vLLM's engine-core process running (it ignores SIGTERM
itself), 0.7 GB each, found after two interrupted runs on this machine. Here: the comparison gets Ctrl-C's SIGINT
during its run's training, passes SIGTERM on, and exits 130 saying how to continue, without a traceback; no process of the run is
left (env workers here; ranks and vLLM's engine core in the two-rank test); rerunning the command resumes
the run from its checkpoint and finishes.

Each test starts its commands in a working directory of its own and looks for leftovers by that directory:
children inherit it and orphans keep it, where the environment marker used before was blind to vLLM's engine
core (it retitles itself, overwriting the environment block /proc shows).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.run import REPO, SMALL, allreduce_buffers_left, clean_env, metrics_so_far, processes_in

from gigpo.infra.stopping import EXIT_CODE, StopRequested


RECIPE = str(REPO / "recipes" / "sokoban_tiny.yaml")


def own_directory(tmp_path: Path) -> Path:
    """The working directory the test's commands run in, which marks their processes (`processes_in`)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


def engine_cores(processes: dict[int, str]) -> list[int]:
    return [pid for pid, cmdline in processes.items() if cmdline.startswith("VLLM::EngineCore")]


def compare(out: Path, cwd: Path, tiny_model_dir: Path) -> subprocess.Popen:
    # transformers generates: vLLM's engine core outliving a stopped run is the two-rank test's check below,
    # and two more engine start-ups here cost about 30 s of CI for it
    cmd = [sys.executable, "-m", "gigpo.cli", "compare", RECIPE, *SMALL, "--algos", "gigpo",
           "--seeds", "1", "--out", str(out), f"model.path={tiny_model_dir}",
           "trainer.iterations=8", "trainer.save_every=1", "trainer.eval_every=100"]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())


def test_sigterm_stops_compare_and_its_run_without_orphans_and_the_rerun_resumes(tmp_path: Path,
                                                                                  tiny_model_dir: Path) -> None:
    cwd = own_directory(tmp_path)
    out = tmp_path / "cmp"
    run_dir = out / "gigpo-s0"
    proc = compare(out, cwd, tiny_model_dir)
    try:
        deadline = time.monotonic() + 300
        while not any(r["iteration"] >= 1 for r in metrics_so_far(run_dir)):  # training, engine up, checkpoint 1 written
            if proc.poll() is not None:
                pytest.fail(f"compare exited before iteration 1:\n{proc.stdout.read()[-3000:]}")
            assert time.monotonic() < deadline, "no iteration in 300 s"
            time.sleep(0.1)
        # compare, its `gigpo train`, the train's env worker: the check below can see what it looks for
        assert len(processes_in(cwd)) >= 3, processes_in(cwd)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        said, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == StopRequested(signal.SIGINT).exit_code == 130, said[-3000:]
    assert "compare stopped by SIGINT" in said and "rerun the same command" in said and "Traceback" not in said
    run_log = (run_dir / "train.log").read_text()
    assert "training stopped by SIGTERM" in run_log and "--resume" in run_log, run_log[-3000:]
    deadline = time.monotonic() + 30  # the engine core reaps its own workers as it exits
    while processes_in(cwd) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_in(cwd) == {}
    stopped_at = max(r["iteration"] for r in metrics_so_far(run_dir))
    assert stopped_at < 8 and not (run_dir / "done.json").exists()

    rerun = compare(out, cwd, tiny_model_dir)
    said, _ = rerun.communicate(timeout=400)
    assert rerun.returncode == 0, said[-3000:]
    assert json.loads((run_dir / "done.json").read_text())["iterations"] == 8
    iterations = [r["iteration"] for r in metrics_so_far(run_dir)]
    assert iterations[-1] == 8 and iterations.count(1) == 1, iterations  # resumed, not restarted from iteration 1


def test_sigterm_to_a_two_rank_train_stops_every_rank_and_its_engine(tmp_path: Path, tiny_model_dir: Path) -> None:
    """DeepSpeed's runner dies of SIGTERM without passing it on, so the ranks used to go on training after
    the `gigpo train` the user had stopped exited. Now it stops their process group: exit 143, no process
    of the run left (DeepSpeed's per-node launcher, ranks, the generation server and its vLLM engine core, env workers), no all-reduce
    buffer left in /dev/shm, and the checkpoints written before the stop complete."""
    cwd = own_directory(tmp_path)
    run_dir = tmp_path / "two-ranks"
    cmd = [sys.executable, "-m", "gigpo.cli", "train", RECIPE, *SMALL, f"trainer.run_dir={run_dir}",
           # a server: on several ranks in-process vLLM runs inside each rank (external launcher), so the engine
           # core process whose cleanup this checks is the server's
           f"model.path={tiny_model_dir}", "rollout.backend=vllm-server", "rollout.enforce_eager=true", "trainer.nprocs=2",
           "trainer.iterations=30", "trainer.save_every=1", "trainer.eval_every=100"]
    log = tmp_path / "train.log"  # a file, not a pipe: orphaned ranks holding a pipe open would hide from wait()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=clean_env())
    try:
        deadline = time.monotonic() + 300
        while not any(r["iteration"] >= 1 for r in metrics_so_far(run_dir)):
            if proc.poll() is not None:
                pytest.fail(f"train exited before iteration 1:\n{log.read_text()[-3000:]}")
            assert time.monotonic() < deadline, "no iteration in 300 s"
            time.sleep(0.1)
        # the parent, DeepSpeed's launcher, two ranks, the server and its engine core: the check below can fail
        assert len(processes_in(cwd)) >= 6 and engine_cores(processes_in(cwd)), processes_in(cwd)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        left = processes_in(cwd)  # at once: the parent returns only after its ranks are gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in processes_in(cwd):  # orphans of a failed check must not train on through other tests
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    said = log.read_text()
    assert proc.returncode == EXIT_CODE, said[-3000:]
    assert "training stopped by SIGTERM" in said and "--resume" in said, said[-3000:]
    assert left == {}, f"processes of the run outlived it: {left}"
    assert allreduce_buffers_left(said) == set()
    stopped_at = max(r["iteration"] for r in metrics_so_far(run_dir))
    assert stopped_at < 30 and not (run_dir / "done.json").exists()
    for iteration in range(1, stopped_at + 1):  # every checkpoint logged before the stop is complete
        assert (run_dir / "checkpoints" / str(iteration) / "meta.json").is_file(), iteration


def test_a_second_signal_does_not_cut_short_the_cleanup_the_first_started() -> None:
    """A multi-rank stop reaches each rank twice (the parent's group signal, then DeepSpeed's launcher passing
    it on); an impatient user sends it twice, or presses Ctrl-C during the stop. The second must not raise
    inside the `finally` that is closing the engines, or they would be left running."""
    script = (
        "import os, signal, time\n"
        "from gigpo.infra.stopping import StopRequested, stop_on_signals\n"
        "stop_on_signals()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "    print('not stopped')\n"
        "except StopRequested:\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.2)  # the handler runs here\n"
        "        print('cleanup finished')\n"
        "    except StopRequested:\n"
        "        print('cleanup cut short')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "cleanup finished", done.stdout + done.stderr


def test_a_stop_survives_pickling_with_its_signal():
    """A stop that crosses a process boundary (a pool's result, a queue) keeps its signal and exit code."""
    import pickle

    for signum, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        back = pickle.loads(pickle.dumps(StopRequested(signum)))
        assert isinstance(back, StopRequested) and back.signum == signum and back.exit_code == code
        assert str(back) == signal.Signals(signum).name
