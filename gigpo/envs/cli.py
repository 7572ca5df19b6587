"""`gigpo envs ...`: list the registered agent envs, check one, or watch an episode (expert or typed).

The `envs` group is shared: other env modules (ALFWorld) add their subcommands to it with
`envs_subparsers`, whichever module registers first creates it.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _json_kwargs(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--kwargs {text!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--kwargs {text!r} must be a JSON object, e.g. '{{\"size\": 6}}'")
    return value


def _cmd_list(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from gigpo.envs.registry import register_plugin_envs

    import gigpo.envs  # noqa: F401

    installed = register_plugin_envs()  # envs that installed packages declare (entry-point group gigpo.envs)
    for env_id in sorted({k for k in gym.registry if k.startswith("gigpo/")} | set(installed)):
        print(env_id)
    return 0


def _make(env_id: str, **kwargs: Any) -> Any:
    """`gym.make` of an id as a recipe names it: "module:Id", a built-in, or an installed package's env."""
    import gymnasium as gym

    from gigpo.envs.registry import env_spec

    return gym.make(env_spec(env_id), **kwargs)


def _cmd_check(args: argparse.Namespace) -> int:
    """Gymnasium's check_env; a failure is one line naming the env and what is wrong, not a traceback."""
    import warnings

    from gymnasium.utils.env_checker import check_env

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(_make(args.env_id, **args.kwargs).unwrapped)
    except Exception as exc:  # an assertion of check_env, or the env's own error while being checked
        message = " ".join(str(exc).split()) or "(no message)"
        print(f"gigpo envs check: {args.env_id} failed: {type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    for warning in caught:  # Gymnasium's checker warns rather than fails on some problems: show them briefly
        print(f"gigpo envs check: warning: {' '.join(str(warning.message).split())}", file=sys.stderr)
    print(f"{args.env_id}: check_env passed")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    """Play one episode with the env's expert, or with actions typed on stdin when --manual."""
    env = _make(args.env_id, max_episode_steps=args.max_steps, **args.kwargs)
    observation, info = env.reset(seed=args.seed)
    print(f"Task: {env.unwrapped.task}\n{observation}")
    total, done, steps = 0.0, False, 0
    while not done:
        action = input("action> ") if args.manual else env.unwrapped.expert_action()
        if action is None:
            print("the env has no expert action here; use --manual")
            return 1
        observation, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
        total, done = total + reward, terminated or truncated
        note = "" if info["action_valid"] else f" (invalid: {info['invalid_reason']})"
        print(f"> {action}{note}  reward {reward:+.2f}\n{observation}")
        steps = steps + 1
    print(f"{'won' if info['won'] else 'not won'} after {steps} steps, return {total:+.2f}, "
          f"{'terminated' if terminated else 'truncated'}")
    return 0


def envs_subparsers(subparsers: Any) -> Any:
    """The `envs` command group's subparsers, creating the group unless another module already did."""
    group = subparsers.choices.get("envs")
    if group is None:
        group = subparsers.add_parser("envs", help="environment tools: list, check, play (and per-env tools)")
    for action in group._actions:  # argparse keeps the group's subparsers action here
        if isinstance(action, argparse._SubParsersAction):
            return action
    return group.add_subparsers(dest="envs_command", metavar="SUBCOMMAND", required=True)


def register(subparsers: Any) -> None:
    from gigpo.config import EnvConfig

    defaults = EnvConfig.model_fields  # the recipe's env defaults, without validating an EnvConfig at startup
    sub = envs_subparsers(subparsers)
    p = sub.add_parser("list", help="print the ids of the gigpo environments")
    p.set_defaults(func=_cmd_list)
    for name, func, text in (("check", _cmd_check, "run Gymnasium's check_env on an env"),
                             ("play", _cmd_play, "play one episode with the expert (or --manual) and print it")):
        p = sub.add_parser(name, help=text)
        p.add_argument("env_id", help="a registered id, e.g. gigpo/Sokoban-v0")
        p.add_argument("--kwargs", type=_json_kwargs, default=defaults["kwargs"].default_factory(),
                       help='env kwargs as JSON, e.g. \'{"size": 6}\'')
        p.set_defaults(func=func)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=defaults["max_steps"].default)
    p.add_argument("--manual", action="store_true", help="read actions from stdin instead of the expert")
