"""`gigpo advantage` end to end: JSONL rows in, advantages out in input order; the JSONL helpers round-trip."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from naive_advantage import naive_advantages

from gigpo.advantage import StepRows, anchor_keys, compute_advantages, read_advantages, read_step_rows, write_step_rows
from gigpo.cli import main

REPO = Path(__file__).resolve().parents[2]
ROWS = [  # string ids, text anchors, rows out of order; "t1" loops back to the kitchen
    {"group": "task-a", "traj": "t1", "step": 1, "reward": 0.0, "anchor": "You are in the hall."},
    {"group": "task-a", "traj": "t0", "step": 0, "reward": 0.0, "anchor": "You are in the kitchen."},
    {"group": "task-a", "traj": "t1", "step": 0, "reward": 0.0, "anchor": "You are in the kitchen."},
    {"group": "task-a", "traj": "t0", "step": 1, "reward": 10.0, "anchor": "You are in the hall."},
    {"group": "task-a", "traj": "t1", "step": 2, "reward": 0.0, "anchor": "You are in the kitchen!"},
    {"group": "task-b", "traj": "t0", "step": 0, "reward": 10.0, "anchor": "You are in the kitchen."},
    {"group": "task-b", "traj": "t1", "step": 0, "reward": 0.0, "anchor": "You are in the kitchen."},
]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def naive(records, **kw):
    cols = {k: [r[k] for r in records] for k in ("group", "traj", "step", "reward", "anchor")}
    return naive_advantages("gigpo", **cols, value=None, lam=0.95, episode_stats="trajectory", **kw)


def test_cli_computes_gigpo_in_input_order(tmp_path):
    out = tmp_path / "adv.jsonl"
    assert main(["advantage", "--estimator", "gigpo", "--input", str(write_jsonl(tmp_path / "in.jsonl", ROWS)),
                 "--output", str(out), "--norm", "mean", "--gamma", "0.9"]) == 0
    got = read_advantages(out)
    keys = [dict(r, anchor=k) for r, k in zip(ROWS, anchor_keys(r["anchor"] for r in ROWS).tolist())]
    want = naive(keys, gamma=0.9, step_weight=1.0, norm="mean")
    np.testing.assert_allclose(got["advantage"], want["advantage"])
    assert got["step_group_size"].tolist() == [2, 2, 2, 2, 1, 2, 2]
    assert set(json.loads(out.read_text().splitlines()[0])) == {"advantage", "episode_advantage", "step_advantage", "step_group_size"}


def test_cli_similarity_groups_near_identical_texts(tmp_path):
    out = tmp_path / "adv.jsonl"
    assert main(["advantage", "--input", str(write_jsonl(tmp_path / "in.jsonl", ROWS)), "--output", str(out),
                 "--similarity", "0.9"]) == 0
    got = read_advantages(out)
    want = naive(ROWS, gamma=0.95, step_weight=1.0, norm="std", similarity=0.9)
    np.testing.assert_allclose(got["advantage"], want["advantage"], atol=1e-9)
    assert got["step_group_size"].tolist() == [2, 3, 3, 2, 3, 2, 2]   # "kitchen!" joins "kitchen."


def test_cli_reports_bad_input_and_exits_2(tmp_path, capsys):
    bad = write_jsonl(tmp_path / "in.jsonl", ROWS + [dict(ROWS[0])])
    assert main(["advantage", "--input", str(bad), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "rows 0 and 7 are the same step" in capsys.readouterr().err
    assert main(["advantage", "--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(128, 256)))
    assert main(["advantage", "--input", str(binary), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "weights.bin: not UTF-8 text" in capsys.readouterr().err


def test_cli_reads_gzipped_step_rows(tmp_path):
    """A compressed dump reads as the plain one (gzip is found by its magic bytes, not the name)."""
    plain = write_jsonl(tmp_path / "in.jsonl", ROWS)
    packed = tmp_path / "in.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    outs = [tmp_path / "plain.jsonl", tmp_path / "packed.jsonl"]
    for source, out in zip((plain, packed), outs):
        assert main(["advantage", "--input", str(source), "--output", str(out)]) == 0
    assert outs[0].read_text() == outs[1].read_text()


def test_installed_command_runs_as_a_process(tmp_path):
    """The real entry point in a fresh interpreter: ppo with values, stdin to stdout, and --stats."""
    records = [dict(r, value=0.1 * i) for i, r in enumerate(ROWS)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "gigpo.cli", "advantage", "--estimator", "ppo", "--input", "-",
                           "--output", "-", "--stats"], input="".join(json.dumps(r) + "\n" for r in records),
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == len(records) and all(r["step_group_size"] == 1 for r in lines)
    assert json.loads(proc.stderr)["adv/rows"] == len(records)
    proc = subprocess.run([sys.executable, "-m", "gigpo.cli", "advantage", "--estimator", "nope", "--input", "-",
                           "--output", "-"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "invalid choice: 'nope'" in proc.stderr


def test_step_rows_round_trip_through_jsonl(tmp_path):
    rows = read_step_rows(write_jsonl(tmp_path / "in.jsonl", ROWS))
    write_step_rows(tmp_path / "again.jsonl", rows)
    again = read_step_rows(tmp_path / "again.jsonl")
    for name in ("group", "traj", "step", "reward", "anchor"):
        np.testing.assert_array_equal(getattr(again, name), getattr(rows, name))
    assert list(again.anchor_text) == [r["anchor"] for r in ROWS]
    keyed = StepRows(group=[1, 1], traj=[0, 1], step=[0, 0], reward=[1, 0], anchor=np.array([2**64 - 1, 5], dtype=np.uint64),
                     value=[0.5, 0.25])
    write_step_rows(tmp_path / "keyed.jsonl", keyed)
    back = read_step_rows(tmp_path / "keyed.jsonl")
    np.testing.assert_array_equal(back.anchor, [-1, 5])
    np.testing.assert_array_equal(back.value, [0.5, 0.25])
    options = dict(gamma=0.95, lam=0.95, step_weight=1.0, norm="std", episode_stats="trajectory", similarity=None)
    np.testing.assert_array_equal(compute_advantages("ppo", back, **options).advantage,
                                  compute_advantages("ppo", keyed, **options).advantage)
