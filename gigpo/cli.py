"""The `gigpo` command. Each subsystem registers its own subcommands; only working ones are listed.

A command module exposes `register(subparsers)`, which adds its parser and sets `func` to a
callable taking the parsed args and returning an exit code. Modules import heavy libraries (torch,
vllm) inside their command functions, so `gigpo --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from gigpo.config import RecipeError, dump_config, load_config

# Subsystem command modules, in the order `gigpo --help` lists them.
COMMAND_MODULES: list[str] = ["gigpo.advantage.cli", "gigpo.envs.cli", "gigpo.envs.alfworld.cli", "gigpo.rollout.cli",
                              "gigpo.trainer.cli"]


def _cmd_config(args: argparse.Namespace) -> int:
    print(dump_config(load_config(args.recipe, args.overrides)), end="")
    return 0


def _cmd_model_init(args: argparse.Namespace) -> int:
    from gigpo.local_model import build_local_model

    corpus = open(args.corpus).read() if args.corpus else None
    out = build_local_model(args.out, args.preset, corpus, args.seed)
    print(f"saved {args.preset} model and tokenizer to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from gigpo.local_model import PRESETS

    parser = argparse.ArgumentParser(prog="gigpo", description="Group-in-Group Policy Optimization for LLM agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("config", help="print a recipe resolved with its bases and overrides")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.set_defaults(func=_cmd_config)

    model = sub.add_parser("model", help="build local models (no model hub needed)")
    model_sub = model.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)
    p = model_sub.add_parser("init", help="build a Qwen2-architecture model and train its tokenizer locally")
    p.add_argument("--out", required=True, help="output directory (loadable with from_pretrained and vllm.LLM)")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model size (default: tiny)")
    p.add_argument("--corpus", default=None, help="text file to train the tokenizer on (default: built-in)")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    p.set_defaults(func=_cmd_model_init)

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # overrides may follow options (`gigpo compare R --seeds 3 trainer.lr=1e-4`): argparse leaves the
    # later ones unparsed; take them for commands that accept overrides, reject anything else
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args) or 0)
    except RecipeError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
