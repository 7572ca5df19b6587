"""`gigpo advantage`: recompute advantages of dumped step rows (JSONL in, JSONL out; see jsonl.py).

    gigpo advantage --estimator gigpo --input steps.jsonl --output adv.jsonl --similarity 0.9

Defaults come from gigpo.config.AlgorithmConfig, so the command computes what training computes.
"""
from __future__ import annotations

import argparse
import json
import sys

from gigpo.config import AlgorithmConfig


def _cmd_advantage(args: argparse.Namespace) -> int:
    from gigpo.advantage import (
        AdvantageInputError, compute_advantages, read_step_rows, step_group_diagnostics, write_advantages,
    )

    try:
        rows = read_step_rows(sys.stdin if args.input == "-" else args.input)
        result = compute_advantages(
            args.estimator, rows, gamma=args.gamma, lam=args.lam, step_weight=args.step_weight, norm=args.norm,
            episode_stats=args.episode_stats, similarity=args.similarity,
        )
    except (AdvantageInputError, OSError) as exc:
        print(f"gigpo advantage: {exc}", file=sys.stderr)
        return 2
    write_advantages(sys.stdout if args.output == "-" else args.output, result)
    if args.stats:
        print(json.dumps(step_group_diagnostics(result)), file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `gigpo advantage` to the top-level parser."""
    from gigpo.advantage.estimators import ESTIMATORS

    defaults = AlgorithmConfig()
    p = subparsers.add_parser(
        "advantage", help="compute per-step advantages of step rows (JSONL) with any estimator",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--estimator", default=defaults.estimator, choices=sorted(ESTIMATORS),
                   help=f"advantage estimator (default: {defaults.estimator})")
    p.add_argument("--input", required=True, help="step rows, JSONL ('-' for stdin)")
    p.add_argument("--output", required=True, help="advantages, JSONL, one line per input row ('-' for stdout)")
    p.add_argument("--gamma", type=float, default=defaults.gamma,
                   help=f"discount of step returns (default: {defaults.gamma})")
    p.add_argument("--lam", type=float, default=defaults.lam, help=f"GAE lambda, ppo only (default: {defaults.lam})")
    p.add_argument("--step-weight", type=float, default=defaults.step_weight,
                   help=f"weight of GiGPO's step part (default: {defaults.step_weight})")
    p.add_argument("--norm", choices=["std", "mean"], default=defaults.norm,
                   help=f"divide by the group std, or only subtract the mean (default: {defaults.norm})")
    p.add_argument("--episode-stats", choices=["trajectory", "steps"], default=defaults.episode_stats,
                   help="episode statistics over trajectories (paper) or step rows "
                   f"(default: {defaults.episode_stats})")
    p.add_argument("--similarity", type=float, default=defaults.similarity,
                   help="group anchors whose text similarity is >= this threshold in (0, 1] (default: exact anchors)")
    p.add_argument("--stats", action="store_true", help="print step-group diagnostics (JSON) to stderr")
    p.set_defaults(func=_cmd_advantage)
