"""RL's first updates must not knock a warm-started, sharp policy down (issue 38, item 0).

A Tower of Hanoi env (tests/envs/hanoi_env.py: 3 disks, 2 start towers, a BFS expert, 8 steps for a 7-move
solution) is learnt by the supervised warm-up (seed 0) to 100% greedy success. Then `gigpo train` runs 3 RL
iterations with sokoban_tiny's settings (lr 3e-4, a fresh Adam) and RL seed 1, the seed whose iteration-2
update broke the policy without a learning-rate warm-up: sampled success 92% -> 51%, greedy 57.5% after
iteration 1, k3 KL 1.01 (this test without `warmup_steps` fails so; docs/results.md, issue 38 item 0).
Sampled success before any update is ~91% (temperature 1), so the check is a fall from there, not an
absolute 90%.

The remedy is the default (`trainer.warmup_steps: 20`, 5 iterations of sokoban_tiny's 4 optimizer steps; set
there once `make train` and E6 were measured not worse with it), so this recipe leaves it unset: a default
that drops back to 0 fails here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.run import clean_env

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "hanoi_env:tests/Hanoi-v0"
RECIPE = f"""\
base: {ROOT / 'recipes' / 'sokoban_tiny.yaml'}
env: {{id: "{ENV_ID}", kwargs: {{}}, max_steps: 8, eval_episodes: 40, workers: 1}}
trainer: {{iterations: 3, sft_steps: 200, sft_seed: 0, seed: 1, eval_every: 1}}
logging: {{wandb_mode: disabled, progress: false, rollouts_every: 0}}
"""
#: The most sampled success may fall below iteration 1's (before any update) in iterations 2-3: the spread
#: of 4 seeds with a 20-step lr warm-up was -4.7 to +7.8 points; the collapse without it was -41.4.
ALLOWED_FALL = 0.10


def test_three_rl_iterations_keep_a_sharp_warm_started_policy(tmp_path: Path) -> None:
    (tmp_path / "hanoi.yaml").write_text(RECIPE)
    run = tmp_path / "run"
    paths = [str(ROOT / "tests" / "envs"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    # clean_env: an in-process engine test earlier in this pytest process leaves MASTER_PORT etc. set, and a
    # child that inherits them tries to listen on that still-bound port (EADDRINUSE, seen in CI)
    proc = subprocess.run([sys.executable, "-m", "gigpo", "train", "hanoi.yaml", f"trainer.run_dir={run}"],
                          cwd=tmp_path, env={**clean_env(), "PYTHONPATH": os.pathsep.join(paths)},
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["iteration"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert rows[0]["eval/success"] >= 0.95, rows[0]  # the premise: the warm-up made a sharp policy
    sampled = [rows[i]["rollout/success"] for i in (1, 2, 3)]
    greedy = [rows[i]["eval/success"] for i in (1, 2, 3)]
    assert min(sampled[1:]) >= sampled[0] - ALLOWED_FALL, f"sampled success over the first 3 RL iterations: {sampled}"
    assert min(greedy) >= 0.90, f"greedy success after each of the first 3 RL iterations: {greedy}"
