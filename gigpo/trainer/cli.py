"""`gigpo train`, `gigpo eval` and `gigpo compare`."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def _cmd_train(args: argparse.Namespace) -> int:
    from gigpo.config import load_config
    from gigpo.trainer.batching import TokenBudgetError
    from gigpo.trainer.loop import TrainingAborted, launch_or_train

    config = load_config(args.recipe, args.overrides)
    try:
        return launch_or_train(config, args.recipe, args.overrides, resume=args.resume)
    except TokenBudgetError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    except TrainingAborted as exc:
        print(f"gigpo: training stopped: {exc}", file=sys.stderr)
        return 3


def _cmd_eval(args: argparse.Namespace) -> int:
    from gigpo.config import load_config
    from gigpo.trainer.loop import evaluate_checkpoint

    config = load_config(args.recipe, args.overrides)
    evaluate_checkpoint(config, args.checkpoint, episodes=args.episodes)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from gigpo.compare import run_all, write_report
    from gigpo.config import load_config

    load_config(args.recipe, args.overrides)  # fail now, not in the first run, on a bad recipe
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    seeds = list(range(args.seeds))
    out = Path(args.out or f"runs/compare-{Path(args.recipe).stem}")
    out.mkdir(parents=True, exist_ok=True)
    command = "gigpo compare " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["compare"] else "gigpo compare"
    run_all(args.recipe, out, algos, seeds, args.budget, args.overrides, parallel=args.parallel)
    report = write_report(out, args.recipe, algos, seeds, command)
    print(f"compare: report written to {report}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy with the recipe's algorithm (GiGPO, GRPO, RLOO, PPO)")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="success rates of a checkpoint on the recipe's evaluation seeds")
    p.add_argument("recipe", help="recipe YAML file (environment and rollout settings)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--checkpoint", required=True, help="HF model directory (e.g. RUN/checkpoints/10/hf)")
    p.add_argument("--episodes", type=int, default=None, help="evaluation episodes (default: env.eval_episodes)")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("compare", help="run several algorithms x seeds on one recipe and write a report")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--algos", default="gigpo,grpo,rloo,ppo", help="comma-separated estimators")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    p.add_argument("--budget", type=int, default=None, help="stop each run after this many environment steps")
    p.add_argument("--out", default=None, help="output directory (default runs/compare-<recipe>)")
    p.add_argument("--parallel", type=int, default=1, help="runs at once (each uses trainer/env processes)")
    p.set_defaults(func=_cmd_compare)
