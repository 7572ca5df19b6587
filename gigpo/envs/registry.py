"""Gymnasium registration of gigpo's environments; importing `gigpo.envs` runs it.

Entry points are "module:Class" strings, so registering costs nothing until an env is made.

A user's own env is found the ways `env_spec` lists: Gymnasium's "module:Id" (the module is imported and
registers the env), or an installed package's entry point in the "gigpo.envs" group (name: the env id,
value: its "module:Class" entry point), registered the first time an unknown id is looked up.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Optional, Union

import gymnasium as gym

#: Episode length when neither `gym.make(max_episode_steps=)` nor the pool's `env.max_steps` sets one: the
#: envs whose papers fix a step budget (WebShop 15, ALFWorld 50) truncate there by default.
DEFAULT_MAX_STEPS: dict[str, int] = {"gigpo/WebShop-v0": 15, "gigpo/ALFWorld-v0": 50}

BUILTIN_ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "gigpo/Sokoban-v0": ("gigpo.envs.sokoban:SokobanEnv", {}),
    "gigpo/Maze-v0": ("gigpo.envs.maze:MazeEnv", {}),
    "gigpo/FrozenLake-v0": ("gigpo.envs.toy_text:frozen_lake", {}),
    "gigpo/CliffWalking-v0": ("gigpo.envs.toy_text:cliff_walking", {}),
    "gigpo/Taxi-v0": ("gigpo.envs.toy_text:taxi", {}),
    "gigpo/TwentyFour-v0": ("gigpo.envs.twenty_four:TwentyFourEnv", {}),
    # entry point imported lazily by Gymnasium: TextWorld loads only when an ALFWorld env is made
    "gigpo/ALFWorld-v0": ("gigpo.envs.alfworld.env:ALFWorldEnv", {}),
    # generated catalogue by default; kwargs.data_path (or $WEBSHOP_DATA) loads the official files
    "gigpo/WebShop-v0": ("gigpo.envs.webshop.env:WebShopEnv", {}),
    # any env above with lognormal step latency (kwargs: env, median_s, p99_s, seed, and the env's own)
    "gigpo/Latency-v0": ("gigpo.envs.latency:with_latency", {}),
}


def _latency_wrappers() -> tuple:
    from gigpo.envs.latency import PRIOR_WRAPPERS

    return PRIOR_WRAPPERS


WRAPS_A_MADE_ENV: dict[str, tuple] = {"gigpo/Latency-v0": _latency_wrappers()}
"""Envs whose entry point returns a wrapper around another `gym.make`-made env: the wrappers it carries."""


def register_env(env_id: str, entry_point: Union[str, Callable[..., gym.Env]], **kwargs: Any) -> None:
    """Register `env_id` unless it already is (importing twice, or in a pool worker, is harmless). `gym.make`
    then wraps it in gigpo.envs.episode_end's guard: no step after the episode ended."""
    from gigpo.envs.episode_end import WRAPPER_SPEC

    if env_id not in gym.registry:
        # Gymnasium skips as many of a spec's additional wrappers as the entry point's env already carries, and
        # checks they match: an env made by gym.make inside an entry point (Latency-v0) lists those first
        prior = WRAPS_A_MADE_ENV.get(env_id, ())
        gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs, additional_wrappers=(*prior, WRAPPER_SPEC),
                     max_episode_steps=DEFAULT_MAX_STEPS.get(env_id))


def register_builtin_envs() -> None:
    for env_id, (entry_point, kwargs) in BUILTIN_ENVS.items():
        register_env(env_id, entry_point, **kwargs)


ENTRY_POINT_GROUP = "gigpo.envs"
"""Installed packages declare envs here: `[project.entry-points."gigpo.envs"] "my/Env-v0" = "my.envs:MyEnv"`."""


def register_plugin_envs() -> list[str]:
    """Register the envs that installed packages declare in the "gigpo.envs" entry-point group; their ids.

    Nothing is imported: each entry point's value is a lazy "module:Class" string, loaded when the env is
    made (in the env workers too, since a pickled spec carries the string)."""
    from importlib.metadata import entry_points

    declared = entry_points(group=ENTRY_POINT_GROUP)
    for point in declared:
        register_env(point.name, point.value)
    return [point.name for point in declared]


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The EnvSpec of `env_id`, found as `gym.make` finds it, which `gym.spec` alone does not do.

    "module:Id" imports the module first (its import registers Id); an id no one has registered yet may
    be an installed package's entry point ("gigpo.envs" group). The spec holds the env's entry point, so
    spawned env workers make the env from it without knowing the id.
    """
    register_builtin_envs()
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except Exception as exc:  # the user's module: any error in it, said in one line
            raise gym.error.Error(f"importing module {module!r} (the part of the id before ':') failed: "
                                  f"{type(exc).__name__}: {exc}; is its folder on PYTHONPATH?") from exc
    if name not in gym.registry:
        register_plugin_envs()
    return gym.spec(name)


# --------------------------------------------------------------------------- recipe checks
# `gigpo config` and `gigpo train` run these before any model or worker starts, so a typo in env.id or
# env.kwargs fails in a second with a hint, not with a traceback after the model has loaded.

def _bare_name(env_id: str) -> str:
    """"ns/Name-v3" -> "name"."""
    return env_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1].rsplit("-v", 1)[0].lower()


def check_env_id(env_id: str) -> str:
    """`env_id` if Gymnasium knows it (importing a "module:Id" prefix as gym.make would); else a hint."""
    import difflib

    try:
        env_spec(env_id)
        return env_id
    except gym.error.Error as exc:
        reason = str(exc)
    # compare names without namespace and version: "gigpo/WebShop-v0" is not close to "gigpo/Sokoban-v0"
    by_name: dict[str, str] = {}
    for known in [*sorted(BUILTIN_ENVS), *sorted(gym.registry)]:  # gigpo's own first
        by_name.setdefault(_bare_name(known), known)
    close = difflib.get_close_matches(_bare_name(env_id), list(by_name), n=1, cutoff=0.75)
    hint = f"did you mean {by_name[close[0]]}? " if close else ""
    ours = ", ".join(sorted(BUILTIN_ENVS))
    raise ValueError(f"env.id={env_id!r} is not a registered environment ({reason}); {hint}gigpo's environments: "
                     f"{ours}; `gigpo envs list` shows them all")


def _keyword_names(fn: Callable[..., Any], optional_only: bool = False) -> tuple[set[str], bool]:
    """Names `fn` accepts by keyword (with `optional_only`, those with a default), and whether it takes **kwargs."""
    import inspect

    params = inspect.signature(fn).parameters.values()
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and not (optional_only and p.default is p.empty)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def env_kwarg_names(env_id: str) -> Optional[set[str]]:
    """Keyword arguments the env's entry point accepts, or None when they cannot be known.

    A class gives its __init__'s names; a factory function its own, and when it also takes **kwargs,
    those of the class it is annotated to return (gigpo's toy-text factories pass them through).
    """
    import typing

    from gymnasium.envs.registration import load_env_creator

    spec = env_spec(env_id)
    creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
    target = creator.__init__ if isinstance(creator, type) else creator
    names, open_ended = _keyword_names(target)
    if open_ended and not isinstance(creator, type):
        try:
            returned = typing.get_type_hints(creator).get("return")
        except Exception:  # unresolvable annotations: the names cannot be known
            returned = None
        if isinstance(returned, type) and issubclass(returned, gym.Env):
            # the factory supplies the class's required arguments; the optional ones pass through
            more, open_ended = _keyword_names(returned.__init__, optional_only=True)
            names |= more
    if open_ended:
        return None
    return names - {"self"}


def check_env_kwargs(env_id: str, kwargs: dict[str, Any], field: str = "env.kwargs") -> None:
    """Reject keyword arguments the environment does not take, naming them and the valid ones."""
    import difflib

    if not kwargs:
        return
    accepted = env_kwarg_names(env_id)
    if "max_steps" in kwargs and (accepted is None or "max_steps" not in accepted):
        raise ValueError(f"{field}.max_steps={kwargs['max_steps']!r}: the episode length is one setting, "
                         f"env.max_steps (the time limit the pool applies and the prompt's 'step X of N'); "
                         f"set env.max_steps={kwargs['max_steps']!r} and drop it from {field}")
    if accepted is None:
        return
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(accepted), n=1, cutoff=0.6)
            hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
        raise ValueError(f"{field} of {env_id}: unknown argument(s) {', '.join(hints)}; it takes "
                         f"{', '.join(sorted(accepted))}")
