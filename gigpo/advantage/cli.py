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
    from gigpo.advantage.estimators import successor_options

    try:
        rows = read_step_rows(sys.stdin if args.input == "-" else args.input)
        result = compute_advantages(
            args.estimator, rows, gamma=args.gamma, lam=args.lam, step_weight=args.step_weight, norm=args.norm,
            episode_stats=args.episode_stats, similarity=args.similarity, **successor_options(args),
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
    p.add_argument("--hgpo-history", type=int, default=defaults.hgpo_history,
                   help=f"hgpo: earlier steps in the longest history key (default: {defaults.hgpo_history})")
    p.add_argument("--hgpo-alpha", type=float, default=defaults.hgpo_alpha,
                   help=f"hgpo: a group keyed by L-1 states weighs L**alpha (default: {defaults.hgpo_alpha})")
    p.add_argument("--hgpo-episode-group", action=argparse.BooleanOptionalAction, default=defaults.hgpo_episode_group,
                   help="hgpo: average the episode-level advantage in as one more group "
                   f"(default: {defaults.hgpo_episode_group})")
    p.add_argument("--graph-gamma", type=float, default=defaults.graph_gamma,
                   help=f"graphgpo: step return 10 * graph_gamma**distance (default: {defaults.graph_gamma})")
    p.add_argument("--graph-episode-weight", type=float, default=defaults.graph_episode_weight,
                   help=f"graphgpo: weight of the episode part (default: {defaults.graph_episode_weight})")
    p.add_argument("--graph-distance", choices=["absolute", "delta"], default=defaults.graph_distance,
                   help=f"graphgpo: distance of the next state, or its change (default: {defaults.graph_distance})")
    p.add_argument("--graph-goal-return", type=float, default=defaults.graph_goal_return,
                   help="graphgpo: a trajectory reached the goal when its return exceeds this "
                   f"(default: {defaults.graph_goal_return})")
    p.add_argument("--stats", action="store_true", help="print step-group diagnostics (JSON) to stderr")
    p.set_defaults(func=_cmd_advantage)
