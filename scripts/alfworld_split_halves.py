"""Copy a generated split's tasks into two halves, even and odd by sorted path, as `train` and `valid_seen`.

    PYTHONPATH=. python scripts/alfworld_split_halves.py ~/.cache/gigpo/alfworld/gen-s0/valid_seen OUT

Issue 38's first learnability curve ran before the 500-task train split existed: demonstrations from one half
of valid_seen, evaluation on the other (docs/results.md). Sorted by path, the halves alternate through the
task types, so both hold all six. Copies, so the source stays as generated.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from gigpo.envs.alfworld.game import GAME_FILE, TRAJ_FILE


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: alfworld_split_halves.py SPLIT_DIR OUT")
    source, out = Path(sys.argv[1]).expanduser(), Path(sys.argv[2])
    trials = sorted(p.parent for p in source.rglob(TRAJ_FILE) if (p.parent / GAME_FILE).is_file())
    if not trials:
        raise SystemExit(f"{source} holds no ALFWorld tasks")
    for k, trial in enumerate(trials):
        shutil.copytree(trial, out / ("train" if k % 2 == 0 else "valid_seen") / trial.relative_to(source))
    print(f"{len(trials)} tasks: {len(trials[0::2])} in {out}/train, {len(trials[1::2])} in {out}/valid_seen")


if __name__ == "__main__":
    main()
