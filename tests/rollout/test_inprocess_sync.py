"""weight_sync=inprocess: the engine core runs in the trainer's process and loads the trainer's tensors by reference.

A spy watches the sync: no copy of a trainer tensor (to another device, or a clone), no weights file in
/dev/shm or the temp dir, no collective. The same spy flags the shm path, so it would catch a fallback. The
one-rank cases (inprocess_sync_cases.py) run in a fresh interpreter, as a trainer's rank does: the engine joins
its process's torch.distributed world, which the rest of a pytest session must not have touched.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


def fresh_env() -> dict[str, str]:
    """This environment without a launcher's rank variables (a test before may have left them set)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def test_one_rank_in_process_sync_cases_in_a_fresh_interpreter():
    """copies nothing and matches the trainer; the spy flags the shm path; a skipped tied head fails the probe;
    a ZeRO-3 actor syncs with no copies (inprocess_sync_cases.py)."""
    cases = Path(__file__).with_name("inprocess_sync_cases.py")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(cases)], cwd=REPO,
                          env=fresh_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "4 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def test_two_ranks_each_sync_their_own_in_process_engine(tiny_model_dir, tmp_path):
    """Two CPU ranks (torch.distributed.run), one in-process engine each, in the ranks' shared world: each
    loads its own rank's weights (different per rank) with no copies, and matches its own model."""
    import json

    from gigpo.infra.ports import free_port

    worker = Path(__file__).with_name("inprocess_two_rank_worker.py")
    env = fresh_env()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(free_port()), str(worker), str(tiny_model_dir)],
                          env=env, capture_output=True, text=True, timeout=600)
    results = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and len(results) == 2, done.stderr[-3000:]
    for r in results:
        assert r["world"] == 2 and r["events"] == [] and r["gap"] <= 2e-3, r
