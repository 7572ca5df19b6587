"""`gigpo train`, `gigpo eval` and `gigpo compare`."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path


def _cmd_train(args: argparse.Namespace) -> int:
    from gigpo.config import load_config
    from gigpo.trainer.batching import TokenBudgetError
    from gigpo.trainer.checkpoint import latest_checkpoint
    from gigpo.trainer.loop import launch_or_train
    from gigpo.trainer.nonfinite import NonFiniteError
    from gigpo.trainer.resume_config import ResumeConfigError, check_resumed_config

    from gigpo.infra.run_lock import RunDirInUse, run_dir_lock
    from gigpo.infra.stopping import StopRequested, stop_on_signals
    from gigpo.plan import PlanError, check_fits
    from gigpo.rollout.weight_sync.verify import SyncMismatchError

    config = load_config(args.recipe, args.overrides)
    stop_on_signals()
    try:
        if "WORLD_SIZE" not in os.environ:  # once, in the process the user started, before any model loads
            check_fits(config)
    except PlanError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    try:
        if "WORLD_SIZE" in os.environ:  # a rank (ours or torchrun's): the process the user started holds the lock
            return launch_or_train(config, resume=args.resume)
        with run_dir_lock(Path(config.trainer.run_dir)):
            if args.resume and (checkpoint := latest_checkpoint(config.trainer.run_dir)) is not None:
                check_resumed_config(config, checkpoint)  # before config.yaml is replaced
            return launch_or_train(config, resume=args.resume)
    except (RunDirInUse, ResumeConfigError) as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    except TokenBudgetError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    except NonFiniteError as exc:  # a NaN/inf anywhere: in the loop's guards or inside update()
        print(f"gigpo: training stopped: {exc}", file=sys.stderr)
        return 3
    except SyncMismatchError as exc:  # rollout.verify_sync: the generator is not sampling the trainer's policy
        print(f"gigpo: training stopped: {exc}", file=sys.stderr)
        return 3
    except StopRequested as exc:  # the loop's `finally` has closed the generator and env workers by now
        print(f"gigpo: training stopped by {exc}; completed checkpoints in {config.trainer.run_dir}/checkpoints "
              "are kept: rerun with --resume to continue", file=sys.stderr, flush=True)
        return exc.exit_code
    except RuntimeError as exc:  # a collective whose peer is gone: say which, and how to go on
        from gigpo.trainer.distributed import lost_rank_message

        message = lost_rank_message(exc)
        if message is None:
            raise
        print(f"gigpo: {message}", file=sys.stderr, flush=True)
        return 4


def _cmd_eval(args: argparse.Namespace) -> int:
    from gigpo.config import load_config
    from gigpo.trainer.evaluation import evaluate_checkpoint, evaluate_start

    config = load_config(args.recipe, args.overrides)
    if args.checkpoint is None:
        evaluate_start(config, episodes=args.episodes)
    else:
        evaluate_checkpoint(config, args.checkpoint, episodes=args.episodes)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from gigpo.config import load_config
    from gigpo.experiments.compare import RunFailed, UnpairedStart, run_all, write_report
    from gigpo.infra.stopping import StopRequested, stop_on_signals

    from gigpo.experiments.compare import parse_variant

    config = load_config(args.recipe, args.overrides)  # fail now, not in the first run, on a bad recipe
    try:
        parsed = [parse_variant(v) for v in args.variant or []]
    except ValueError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    variants = {name: (estimator, extra) for name, estimator, extra in parsed}
    for estimator, extra in variants.values():
        load_config(args.recipe, [*args.overrides, *extra, f"algorithm.estimator={estimator}"])
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    for algo in algos:   # an unknown label fails here, naming the valid estimators
        if algo not in variants:
            load_config(args.recipe, [*args.overrides, f"algorithm.estimator={algo}"])
    seeds = list(range(args.seeds))
    pair = tuple(a.strip() for a in args.pair.split(","))
    if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
        print(f"gigpo: --pair {args.pair!r} must name two different algorithms, e.g. --pair gigpo,grpo", file=sys.stderr)
        return 2
    warmup_seed = args.warmup_seed if args.shared_warmup else None
    if args.shared_warmup and config.trainer.sft_steps == 0:
        print("gigpo: --shared-warmup: the recipe has no warm-up (trainer.sft_steps=0), so every run already "
              "starts from the same weights", flush=True)
    out = Path(args.out or f"runs/compare-{Path(args.recipe).stem}")
    out.mkdir(parents=True, exist_ok=True)
    command = "gigpo compare " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["compare"] else "gigpo compare"
    stop_on_signals()
    try:
        run_all(args.recipe, out, algos, seeds, args.budget, args.overrides, parallel=args.parallel,
                warmup_seed=warmup_seed, warm_up=config.trainer.sft_steps > 0, variants=variants)
    except StopRequested as exc:  # run_all has stopped its runs by now
        print(f"gigpo: compare stopped by {exc}; finished runs are kept and interrupted ones resume from their "
              "last checkpoint: rerun the same command to continue", file=sys.stderr, flush=True)
        return exc.exit_code
    except (UnpairedStart, RunFailed) as exc:  # run_all has stopped its runs by now
        print(f"gigpo: compare stopped: {exc}", file=sys.stderr, flush=True)
        return 1
    report = write_report(out, args.recipe, algos, seeds, command, pair=pair, name=args.report_name)
    print(f"compare: report written to {report}")
    return 0


def _cmd_warmup(args: argparse.Namespace) -> int:
    from gigpo.config import load_config
    from gigpo.trainer.warmup_build import build_artifact

    config = load_config(args.recipe, args.overrides)
    digest = build_artifact(config, Path(args.out))
    print(f"saved the warm-up to {args.out} (sha256 {digest}); start RL from it with these recipe lines:\n"
          f"trainer:\n  sft_artifact: {args.out}\n  sft_artifact_sha256: {digest}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy with the recipe's algorithm (GiGPO, GRPO, RLOO, PPO, HGPO, GraphGPO)")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("warmup", help="build the recipe's supervised warm-up once and save it as an artifact "
                       "(weights and sha256) that runs start from on any machine")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--out", required=True, help="new folder for the artifact (an HF model and its SHA256 file)")
    p.set_defaults(func=_cmd_warmup)
    p = sub.add_parser("eval", help="success rates of a checkpoint (or the recipe's start) on the recipe's evaluation seeds")
    p.add_argument("recipe", help="recipe YAML file (environment and rollout settings)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--checkpoint", default=None, help="HF model directory (e.g. RUN/checkpoints/10/hf); without it, "
                   "the policy the recipe's runs start from (its warm-up artifact, digest checked, or model.path)")
    p.add_argument("--episodes", type=int, default=None, help="evaluation episodes (default: env.eval_episodes)")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("compare", help="run several algorithms x seeds on one recipe and write a report",
                       description="Run every algorithm with seeds 0..N-1 (one `gigpo train` each, resumable) and "
                       "write OUT/report.md: success against env steps, paired statistics for --pair (seed k of "
                       "one algorithm against seed k of the other: same task seeds every iteration, and with "
                       "--shared-warmup the same warm-up checkpoint), curves with 95% bands, and step-group "
                       "statistics over training.")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--algos", default="gigpo,grpo,rloo,ppo", help="comma-separated estimators")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    p.add_argument("--budget", type=int, default=None, help="stop each run after this many environment steps")
    p.add_argument("--out", default=None, help="output directory (default runs/compare-<recipe>)")
    p.add_argument("--parallel", type=int, default=1, help="runs at once (each uses trainer/env processes)")
    p.add_argument("--shared-warmup", action="store_true",
                   help="one warm-up checkpoint for every algorithm and seed (trainer.sft_seed=--warmup-seed), so "
                        "seeds differ only in RL sampling; without it each seed warms up with its own seed")
    p.add_argument("--warmup-seed", type=int, default=0, help="seed of the shared warm-up (default 0)")
    p.add_argument("--pair", default="gigpo,grpo",
                   help="A,B: the report's paired statistics of A - B per seed (mean, t-based 95%% CI, paired t-test, "
                        "Wilcoxon signed-rank) and env steps for A to reach B's final success (default gigpo,grpo)")
    p.add_argument("--variant", action="append", metavar="'NAME=ESTIMATOR [k=v ...]'",
                   help="an algorithm label for --algos with its own overrides, e.g. --variant 'gigpo_mean=gigpo "
                        "algorithm.norm=mean' --algos gigpo,grpo,gigpo_mean (repeatable); its runs go to OUT/NAME-s<seed>")
    p.add_argument("--report-name", default="report",
                   help="write OUT/NAME.md (and NAME_-prefixed figures): several reports over subsets of one "
                        "comparison's runs, e.g. 5 seeds of gigpo,grpo and 3 seeds with a variant (default report)")
    p.set_defaults(func=_cmd_compare)
