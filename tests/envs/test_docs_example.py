"""The example in docs/envs.md is the file the suite runs, it is short, and it plays whole episodes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "guess_number.py"


def test_docs_include_the_example_verbatim_and_it_is_under_40_lines():
    source = EXAMPLE.read_text()
    assert f"```python\n{source}```" in (ROOT / "docs" / "envs.md").read_text()
    assert len(source.splitlines()) < 40


def test_the_example_runs_full_episodes_through_the_pool():
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [line.split(" ", 5) for line in run.stdout.strip().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("0", "0"), ("1", "0"), ("2", "1"), ("3", "1")]
    assert all(r[3] == "True" and r[5].endswith("is correct.") for r in rows)
    assert rows[0][2:] == rows[1][2:] and rows[2][2:] == rows[3][2:]  # one seed per group, one expert path
    assert all(1 <= int(r[2]) <= 4 for r in rows)  # binary search over 9 numbers needs at most 4 guesses
