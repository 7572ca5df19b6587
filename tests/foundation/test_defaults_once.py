"""Every default lives once, in gigpo/config.py: no other module of gigpo/ writes a setting's default again.

The check reads the source (`ast`), not the running code. A "default" is a function parameter's default, a
class-body field's value (dataclasses), or an argparse `default=`. It is tied to a setting by name: a
parameter called `max_staleness` is rollout.max_staleness. Two kinds of hit:

- repeated: the literal equals the config field's default (None aside: it writes no value). Read the value
  from the config class instead (`_ROLLOUT = RolloutConfig()`, then `= _ROLLOUT.max_staleness`), or make
  the parameter required;
- disagreeing: for the sections that engine and env code receive (rollout, env, trainer), any other literal,
  None included: such a default differs from what the recipe gives, so a caller that forgets to pass the
  setting silently runs another configuration.

ALLOWED lists the true exceptions, each with its reason.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Iterator

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from gigpo import config as config_module

ROOT = Path(__file__).resolve().parents[2]
STRICT_SECTIONS = ("RolloutConfig", "EnvConfig", "TrainerConfig")
"""Sections whose settings engine and env code receive: any literal default of theirs elsewhere is a hit."""

GENERIC_NAMES = {
    "seed": "every tool and API has its own seed (Gymnasium's reset, a request's sampling seed, a data "
            "generator's); trainer.seed and model.seed reach the code that uses them by name",
}

ALLOWED: dict[tuple[str, str], str] = {
    ("gigpo/advantage/estimators.py", "step_min_spread"):
        "0.0 is the off value of an opt-in remedy; estimators are pure and cannot import gigpo.config "
        "(config imports them to check algorithm.estimator)",
    ("gigpo/rollout/collect.py", "turns"):
        "None: play the generator's own turns (set from rollout.turns by the factory); a value overrides it per call",
    ("gigpo/rollout/engine_settings.py", "sleep_level"):
        "the engine's sleep level, not the setting: 0 builds it without vLLM's sleep mode (servers, hf, async); "
        "from_config gives rollout.sleep_level where it applies",
    ("gigpo/rollout/types.py", "stop"):
        "a sampling call without stop strings (the sync probe, greedy checks); the rollout passes rollout.stop",
    ("gigpo/trainer/distributed.py", "backend"): "torch.distributed's backend (gloo, nccl), not rollout.backend",
    ("gigpo/experiments/compare.py", "eval_episodes"):
        "a compared run's count of evaluation episodes, a result, not the setting",
    ("gigpo/infra/cpu_bf16.py", "kwargs"): "torch's __torch_dispatch__ signature, not env.kwargs",
    ("gigpo/envs/pool.py", "max_steps"):
        "None: the env's own step cap (its registered TimeLimit); the trainer passes env.max_steps",
    ("gigpo/envs/webshop/baselines.py", "max_steps"):
        "the WebShop baselines' own step cap (the paper's 15), a separate script, not a training setting",
    ("gigpo/envs/alfworld/env.py", "prompt_template"):
        "the env's own template (a class attribute); env.prompt_template=None means: use it",
    ("gigpo/envs/webshop/env.py", "prompt_template"):
        "the env's own template (a class attribute); env.prompt_template=None means: use it",
    ("gigpo/trainer/losses.py", "temperature"):
        "1.0 divides the logits by one (the untempered distribution) in a pure loss function; engines pass "
        "the rollout's temperature",
    ("gigpo/trainer/batching.py", "layout"):
        "a resolved layout for one collate call (packed, padded, shared); auto is resolved by the engine",
}


def _config_defaults() -> dict[str, list[tuple[str, Any]]]:
    """Field name -> [(section class, default)] over every section of gigpo/config.py with a plain default."""
    fields: dict[str, list[tuple[str, Any]]] = {}
    for name, cls in vars(config_module).items():
        if not (isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == config_module.__name__):
            continue
        for field_name, field in cls.model_fields.items():
            if field.default_factory is not None:
                default = field.default_factory()
            elif field.default is PydanticUndefined:
                continue
            else:
                default = field.default
            if isinstance(default, BaseModel):
                continue  # a nested section, not a setting
            fields.setdefault(field_name, []).append((name, default))
    return fields


def _defaults(tree: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """(name, default expression) of every parameter default, class-body field value and argparse default."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            yield from ((a.arg, d) for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults))
            yield from ((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
                    yield statement.target.id, statement.value
                elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                        and isinstance(statement.targets[0], ast.Name):
                    yield statement.targets[0].id, statement.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            option = next((a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")),
                          None)
            for keyword in node.keywords:
                if option and keyword.arg == "default":
                    yield option.lstrip("-").replace("-", "_"), keyword.value


def _same(literal: Any, default: Any) -> bool:
    if isinstance(literal, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(literal) == list(default)
    return type(literal) in (type(default), int, float) and literal == default


def find_repeated_defaults(root: Path = ROOT) -> list[str]:
    """Every literal default in gigpo/ (but config.py) of a setting's name that repeats or disagrees with the config."""
    fields = _config_defaults()
    hits = []
    for path in sorted((root / "gigpo").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative == "gigpo/config.py":
            continue
        for name, expression in _defaults(ast.parse(path.read_text())):
            if name not in fields or name in GENERIC_NAMES or (relative, name) in ALLOWED:
                continue
            try:
                literal = ast.literal_eval(expression)
            except ValueError:
                continue  # not a literal: read from somewhere (the config, we hope; review sees the rest)
            for section, default in fields[name]:
                repeated = literal is not None and _same(literal, default)
                disagrees = section in STRICT_SECTIONS and not _same(literal, default) and \
                    not (literal is None and default is None)
                if repeated or disagrees:
                    kind = "repeats" if repeated else f"disagrees with {default!r} in"
                    hits.append(f"{relative}:{expression.lineno}: {name}={literal!r} {kind} {section}.{name}; "
                                f"read it from gigpo.config.{section} (or pass it from the recipe)")
    return hits


def test_no_setting_has_a_second_default_outside_the_config() -> None:
    hits = find_repeated_defaults()
    assert not hits, "defaults written outside gigpo/config.py:\n" + "\n".join(hits)


def test_every_allowed_exception_still_exists() -> None:
    """An allow-list entry whose default is gone would silently allow a new one: drop it instead."""
    fields = _config_defaults()
    for (relative, name), reason in ALLOWED.items():
        assert name in fields, f"ALLOWED names {name}, which is no config field ({reason})"
        names = {n for n, _ in _defaults(ast.parse((ROOT / relative).read_text()))}
        assert name in names, f"ALLOWED entry ({relative}, {name}) has no default there any more: remove it"


@pytest.mark.parametrize("source, expected", [
    ("def f(max_staleness: int = 1): pass", "repeats RolloutConfig.max_staleness"),
    ("def f(turns='batched'): pass", "disagrees with 'auto' in RolloutConfig.turns"),
    ("class S:\n    mini_batches: int | None = None", "disagrees with 4 in TrainerConfig.mini_batches"),
    ("p.add_argument('--max-new-tokens', type=int, default=512)", "repeats RolloutConfig.max_new_tokens"),
    ("def f(invalid_action_penalty=0.1): pass", "repeats EnvConfig.invalid_action_penalty"),
])
def test_the_check_catches_each_kind_of_second_default(tmp_path: Path, source: str, expected: str) -> None:
    (tmp_path / "gigpo").mkdir()
    (tmp_path / "gigpo" / "module.py").write_text(source + "\n")
    hits = find_repeated_defaults(tmp_path)
    assert len(hits) == 1 and expected in hits[0], hits


def test_values_read_from_the_config_pass(tmp_path: Path) -> None:
    (tmp_path / "gigpo").mkdir()
    (tmp_path / "gigpo" / "module.py").write_text(
        "_ROLLOUT = RolloutConfig()\ndef f(max_staleness: int = _ROLLOUT.max_staleness, workers=None): pass\n")
    assert find_repeated_defaults(tmp_path) == []
