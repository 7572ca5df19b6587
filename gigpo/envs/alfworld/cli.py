"""`gigpo envs alfworld-generate` (make expert-verified tasks) and `gigpo envs alfworld-eval`."""
from __future__ import annotations

import argparse
from typing import Any

from gigpo.envs.alfworld.spec import MAX_STEPS, SPLITS, TASK_TYPES
from gigpo.envs.cli import envs_subparsers


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _cmd_generate(args: argparse.Namespace) -> int:
    from gigpo.envs.alfworld.generate import generate_tasks
    from gigpo.infra.progress import Progress

    with Progress(f"alfworld {args.split} tasks", total=args.n, unit="task", enabled=not args.quiet, leave=True) as bar:
        written = generate_tasks(args.out, args.n, seed=args.seed, split=args.split, task_types=args.task_types,
                                 max_steps=args.max_steps, start=args.start, progress=bar.update)
    print(f"wrote {len(written)} expert-verified {args.split} tasks under {args.out}/{args.split} "
          f"(use env kwargs data_path={args.out!r}, split={args.split!r})")
    print("Scores on generated tasks are not comparable with published ALFWorld numbers.")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from gigpo.envs.alfworld.evaluate import evaluate, expert_policy

    filters = {"scene_range": args.scene_range, "max_walkthrough": args.max_walkthrough}
    result = evaluate(expert_policy, args.data, split=args.split, task_types=args.task_types, episodes=args.episodes,
                      workers=args.workers, max_steps=args.max_steps,
                      env_kwargs={"expert": True, **{k: v for k, v in filters.items() if v is not None}})
    print(result.summary())
    return 0


def register(subparsers: Any) -> None:
    sub = envs_subparsers(subparsers)

    p = sub.add_parser("alfworld-generate", help="write ALFWorld tasks from the alfworld wheel's floor plans, "
                       "each verified solvable by the expert",
                       description="Tasks go to OUT/SPLIT/<task folder>/<trial>/ (traj_data.json, game.tw-pddl). "
                       "train and valid_seen use ALFRED's training floor plans, valid_unseen its held-out ones. "
                       "The same arguments write byte-identical files.")
    p.add_argument("--out", required=True, help="output root (pass it as env kwargs data_path)")
    p.add_argument("--n", type=_positive_int, required=True, help="number of tasks; task types are cycled")
    p.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    p.add_argument("--split", choices=SPLITS, default="train", help="which scenes to draw from (default train)")
    p.add_argument("--task-types", nargs="+", choices=TASK_TYPES, default=list(TASK_TYPES), metavar="TYPE",
                   help=f"subset of: {', '.join(TASK_TYPES)}")
    p.add_argument("--start", type=int, default=0, help="index of the first task (shards: run 0..n-1 and n..2n-1 "
                   "in parallel to get the same files as one run of 2n)")
    p.add_argument("--max-steps", type=_positive_int, default=MAX_STEPS,
                   help=f"the expert must win within this many steps (default {MAX_STEPS})")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("alfworld-eval", help="success rate of the fixed expert on an ALFWorld split, per task type")
    p.add_argument("--data", default=None, help="data root (default: $ALFWORLD_DATA)")
    p.add_argument("--split", choices=SPLITS, default="valid_unseen")
    p.add_argument("--task-types", nargs="+", choices=TASK_TYPES, default=None, metavar="TYPE")
    p.add_argument("--scene-range", nargs=2, type=int, default=None, metavar=("FIRST", "LAST"),
                   help="only ALFRED scenes FIRST..LAST (1-30 kitchens, 201-230 living rooms, 301-330 bedrooms, "
                   "401-430 bathrooms)")
    p.add_argument("--max-walkthrough", type=_positive_int, default=None,
                   help="only tasks whose stored expert walkthrough has at most this many steps")
    p.add_argument("--episodes", type=_positive_int, default=None, help="default: every task of the split once")
    p.add_argument("--workers", type=_positive_int, default=None, help="env worker processes (default: core count)")
    p.add_argument("--max-steps", type=_positive_int, default=MAX_STEPS)
    p.set_defaults(func=_cmd_eval)
