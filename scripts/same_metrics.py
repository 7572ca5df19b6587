"""Two runs' metrics.jsonl, compared key by key: the check that a change kept a seeded run's behaviour.

    python scripts/same_metrics.py RUN_A/metrics.jsonl RUN_B/metrics.jsonl [--ignore time/ perf/]

Both runs must be seeded alike and run on the same machine. Every line is one logged iteration; every key
must be in both files with the same value, bit for bit (floats as JSON wrote them), except the keys that
start with an ignored prefix: wall-clock times (`time/`) and speed and memory (`perf/`) differ between
any two runs. Prints one line per difference (at most 20) and a summary; exits 1 when anything differs.

Last outputs (issue 40's one step record and weight-sync module, 2026-11-28, this 2-core CPU machine, load 2-9
from other work): `OMP_NUM_THREADS=1 GIGPO_CACHE=<fresh, the tiny models copied in> gigpo train
recipes/sokoban_tiny.yaml trainer.iterations=20 trainer.run_dir=... logging.wandb_mode=disabled
logging.progress=false`, before (a worktree of c6cef53) and after, one run at a time:

    one rank, sync (after: 6ff7f02):            identical: 21 and 21 lines, 1409 values compared (ignoring keys starting with time/, perf/)
    one rank, rollout.mode=async (6ff7f02):     identical: 21 and 21 lines, 1529 values compared (ignoring keys starting with time/, perf/)
    trainer.nprocs=2 (after: f51083d, 257 s and 247 s):
                                                identical: 21 and 21 lines, 1409 values compared (ignoring keys starting with time/, perf/)

Earlier (issue 40's renames and moves: main 9ff476b against names-homes d4bd289 and 5429058): identical in sync
and async mode, and the warm-ups (different cache keys) gave byte-identical weights.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

MAX_SHOWN = 20


def read_lines(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"same_metrics: cannot read {path}: {exc}") from None


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]], ignore: Sequence[str]) -> tuple[list[str], int]:
    """Every difference, as one line each, and the number of (line, key) values compared."""
    found, compared = [], 0
    if len(a) != len(b):
        found.append(f"line count: {len(a)} against {len(b)}")
    for i, (row_a, row_b) in enumerate(zip(a, b), start=1):
        keys = {k for k in {*row_a, *row_b} if not k.startswith(tuple(ignore))}
        for key in sorted(keys):
            compared += 1
            if key not in row_a or key not in row_b:
                found.append(f"line {i} {key}: only in {'the first' if key in row_a else 'the second'}")
            elif row_a[key] != row_b[key]:
                found.append(f"line {i} {key}: {row_a[key]!r} against {row_b[key]!r}")
    return found, compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--ignore", nargs="*", default=["time/", "perf/"], help="key prefixes left out")
    args = parser.parse_args()
    a, b = read_lines(args.a), read_lines(args.b)
    found, compared = differences(a, b, args.ignore)
    for line in found[:MAX_SHOWN]:
        print(line)
    if len(found) > MAX_SHOWN:
        print(f"... and {len(found) - MAX_SHOWN} more")
    verdict = "identical" if not found else f"{len(found)} differences"
    print(f"{verdict}: {len(a)} and {len(b)} lines, {compared} values compared (ignoring keys starting with "
          f"{', '.join(args.ignore) or 'nothing'})")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
