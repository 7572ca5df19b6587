"""`gigpo advantage`: recompute advantages of dumped step rows (JSONL in, JSONL out; see jsonl.py).

    gigpo advantage --estimator gigpo --input steps.jsonl --output adv.jsonl --similarity 0.9
    gigpo advantage --estimator hgpo --input RUN_DIR/records/000010-train.jsonl.gz --output adv.jsonl --stats

The input is step rows (`logging.log_rollouts` writes them to RUN_DIR/rollouts/, plain or gzipped), or a rollout
record as every run writes to RUN_DIR/records/: its steps in the record's order, one output line each, scored with
the options its run trained with unless given (the header names them). A record holds anchor keys, not anchor
texts, so --similarity needs step rows.

Other defaults come from gigpo.config.AlgorithmConfig, so the command computes what training computes.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from gigpo.advantage.estimators import AdvantageOptions
from gigpo.config import AlgorithmConfig, RolloutConfig

if TYPE_CHECKING:
    from gigpo.advantage import StepRows


SHOWN_OPTIONS = ("estimator", "gamma", "step_weight", "norm", "episode_stats")
"""The options the note on a scored record always names (the others only where they are not the defaults)."""
RECORDED_OPTIONS = (*SHOWN_OPTIONS, *(f.name for f in fields(AdvantageOptions) if f.name not in SHOWN_OPTIONS
                                     and f.name != "similarity"))  # a record keeps anchor keys: no similarity
"""The options a rollout record's header names: unless given, a record is scored with its run's own (records
written before a name was added lack it: the default then)."""


def _default(name: str) -> Any:
    """What training uses for `name` when a recipe does not set it."""
    if name == "split_versions":
        return RolloutConfig().group_versions != "mixed"
    return getattr(AlgorithmConfig(), name)


def read_input(source: str, similarity: Optional[float]) -> tuple["StepRows", Optional[dict[str, Any]]]:
    """The step rows of `source` ('-' for stdin, a step-row file, or a rollout record), and the record's header
    (None for step rows)."""
    from gigpo.advantage import AdvantageInputError, read_step_rows
    from gigpo.advantage.jsonl import open_text

    if source == "-":
        return read_step_rows(sys.stdin), None
    try:
        with open_text(source) as f:
            first = json.loads(f.readline() or "null")
    except (ValueError, EOFError, OSError):  # not JSON, not UTF-8, a broken gzip: read_step_rows names the fault
        first = None
    if not (isinstance(first, dict) and first.get("kind") == "header"):
        return read_step_rows(source), None
    from gigpo.viewer.record_files import record_step_rows

    if similarity is not None:
        raise AdvantageInputError(f"{source} is a rollout record: it keeps anchor keys, not the anchor texts that "
                                  "--similarity compares; train with logging.log_rollouts=true and give "
                                  "RUN_DIR/rollouts/<iteration>.jsonl instead")
    try:
        header, rows = record_step_rows(Path(source))
    except AdvantageInputError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise AdvantageInputError(f"{source}: a malformed rollout record ({type(exc).__name__}: {exc})") from None
    return rows, header


def recorded_options(header: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The options a rollout record's run trained with: its header's, else training's defaults (a record written
    before an option existed lacks it). What a record is scored with when nothing overrides them."""
    header = header or {}
    return {name: header[name] if header.get(name) is not None else _default(name) for name in RECORDED_OPTIONS}


def _resolve_options(args: argparse.Namespace, header: Optional[dict[str, Any]]) -> None:
    """Fill the options not given: from a record's header (what its run trained with), else training's defaults."""
    recorded = recorded_options(header)
    for name in RECORDED_OPTIONS:
        if getattr(args, name) is None:
            setattr(args, name, recorded[name])
    if header is None:
        return
    shown = [*SHOWN_OPTIONS, *(n for n in RECORDED_OPTIONS[len(SHOWN_OPTIONS):] if getattr(args, n) != _default(n))]
    used = " ".join(f"{name}={getattr(args, name)}" for name in shown)
    print(f"gigpo advantage: {args.input} is the {header.get('phase')} rollout record of iteration "
          f"{header.get('iteration')} ({header.get('groups_kept')} of {header.get('groups_total')} groups); "
          f"scored with {used} (options not given are the run's)", file=sys.stderr)
    if header.get("similarity") is not None:
        print(f"gigpo advantage: its run grouped anchors by similarity {header['similarity']}; a record keeps only "
              "anchor keys, so these step groups are exact anchors", file=sys.stderr)


def _cmd_advantage(args: argparse.Namespace) -> int:
    from gigpo.advantage import AdvantageInputError, compute_advantages, step_group_diagnostics, write_advantages
    from gigpo.advantage.estimators import advantage_options

    try:
        rows, header = read_input(args.input, args.similarity)
        _resolve_options(args, header)
        result = compute_advantages(args.estimator, rows, **advantage_options(args, args.split_versions))
    except (AdvantageInputError, OSError, EOFError) as exc:
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
    recorded = "a record's own, else "  # RECORDED_OPTIONS: None until _resolve_options
    p.add_argument("--estimator", default=None, choices=sorted(ESTIMATORS),
                   help=f"advantage estimator (default: {recorded}{defaults.estimator})")
    p.add_argument("--input", required=True,
                   help="step rows, JSONL, plain or gzipped ('-' for stdin), or a rollout record (RUN_DIR/records/)")
    p.add_argument("--output", required=True, help="advantages, JSONL, one line per input row ('-' for stdout)")
    p.add_argument("--gamma", type=float, default=None,
                   help=f"discount of step returns (default: {recorded}{defaults.gamma})")
    p.add_argument("--lam", type=float, default=None, help=f"GAE lambda, ppo only (default: {recorded}{defaults.lam})")
    p.add_argument("--step-weight", type=float, default=None,
                   help=f"weight of GiGPO's step part (default: {recorded}{defaults.step_weight})")
    p.add_argument("--norm", choices=["std", "mean"], default=None,
                   help=f"divide by the group std, or only subtract the mean (default: {recorded}{defaults.norm})")
    p.add_argument("--episode-stats", choices=["trajectory", "steps"], default=None,
                   help="episode statistics over trajectories (paper) or step rows "
                   f"(default: {recorded}{defaults.episode_stats})")
    p.add_argument("--similarity", type=float, default=defaults.similarity,
                   help="group anchors whose text similarity is >= this threshold in (0, 1] (default: exact anchors)")
    p.add_argument("--step-min-spread", type=float, default=None,
                   help="a step group whose returns spread less than this gets no step part "
                   f"(default: {recorded}{defaults.step_min_spread})")
    p.add_argument("--split-versions", action=argparse.BooleanOptionalAction, default=None,
                   help="step groups split by policy version, as rollout.group_versions=separate trains "
                   f"(default: {recorded}{_default('split_versions')}; rows without versions: no effect)")
    p.add_argument("--hgpo-history", type=int, default=None,
                   help=f"hgpo: earlier steps in the longest history key (default: {recorded}{defaults.hgpo_history})")
    p.add_argument("--hgpo-alpha", type=float, default=None,
                   help=f"hgpo: a group keyed by L-1 states weighs L**alpha (default: {recorded}{defaults.hgpo_alpha})")
    p.add_argument("--hgpo-episode-group", action=argparse.BooleanOptionalAction, default=None,
                   help="hgpo: average the episode-level advantage in as one more group "
                   f"(default: {recorded}{defaults.hgpo_episode_group})")
    p.add_argument("--graph-gamma", type=float, default=None,
                   help=f"graphgpo: step return 10 * graph_gamma**distance (default: {recorded}{defaults.graph_gamma})")
    p.add_argument("--graph-episode-weight", type=float, default=None,
                   help=f"graphgpo: weight of the episode part (default: {recorded}{defaults.graph_episode_weight})")
    p.add_argument("--graph-distance", choices=["absolute", "delta"], default=None,
                   help="graphgpo: distance of the next state, or its change "
                   f"(default: {recorded}{defaults.graph_distance})")
    p.add_argument("--graph-goal-return", type=float, default=None,
                   help="graphgpo: a trajectory reached the goal when its return exceeds this "
                   f"(default: {recorded}{defaults.graph_goal_return})")
    p.add_argument("--stats", action="store_true", help="print step-group diagnostics (JSON) to stderr")
    p.set_defaults(func=_cmd_advantage)
