"""rollout.verify_sync, on by default with vLLM: a sync that delivers wrong weights stops `gigpo train`
with an error naming the gap, its bound and the setting (the check GPU runs with CUDA graphs rely on)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.run import REPO, SMALL, clean_env

# A transfer fault: from the first sync after an update (version 1) on, the engine receives every tensor
# with noise added, while the trainer keeps the right ones. The engine, the probe and the loop are real.
DRIVER = """
import sys, torch
from gigpo.rollout.vllm_backend import VLLMGenerator
load = VLLMGenerator.update_weights
def corrupted(self, named_tensors, version):
    g = torch.Generator().manual_seed(version)
    if version >= 1:
        named_tensors = ((n, t + 0.05 * torch.randn(t.shape, generator=g, dtype=t.dtype)) for n, t in named_tensors)
    return load(self, named_tensors, version)
VLLMGenerator.update_weights = corrupted
from gigpo.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_wrong_sync_stops_training_naming_gap_bound_and_setting(tmp_path: Path) -> None:
    run = tmp_path / "wrong_sync"
    cmd = [sys.executable, "-c", DRIVER, "train", "recipes/sokoban_tiny.yaml", *SMALL, f"trainer.run_dir={run}",
           "rollout.backend=vllm", "rollout.enforce_eager=true", "model.dtype=fp32", "trainer.iterations=1",
           "env.eval_episodes=1",
           # the engine core in this process: no second interpreter importing vLLM (~15 s). The verification is
           # the same for every transport: update_weights (patched above) delivers, then the probe compares
           "rollout.weight_sync=inprocess"]  # no rollout.verify_sync: the default must check
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=clean_env())
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-4000:]
    err = proc.stderr
    assert "gigpo: training stopped: weight sync to version 1 failed verification" in err, err[-3000:]
    assert "largest log-prob difference" in err and "(atol=0.002)" in err and "(mean_atol=0.002)" in err
    assert "rollout.verify_sync=false" in err and "Traceback" not in err
    logged = [line for line in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").exists() else []
    assert not any('"iteration": 1' in line for line in logged), "iteration 1 was logged after a failed sync"
    assert proc.stdout.count("memory phases are off on CPU") == 1
