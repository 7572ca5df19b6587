"""What `--resume` may change: the settings given now against the run's own `config.yaml`.

A resume continues the checkpoint's weights, optimizer and RNG under the settings of the new command. Most changes
are legitimate (more iterations, another machine's memory or timeout settings, a lower learning rate after a
blow-up), and are listed, with the settings the earlier iterations ran under kept beside the new config.yaml, so
that no record of them is lost. A few make the continuation another experiment that matches neither its checkpoint
nor its own first iterations (another model or adapter shape, environment, estimator or seed): those stop the
resume before anything loads. Before this check a forgotten override (compare resumes with the command's
overrides) replaced config.yaml without a word."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Optional

import yaml

from gigpo.config import Config, fixed_on_resume_keys

FIXED_KEYS = fixed_on_resume_keys()
"""Settings a resumed run must share with the iterations it continues: the fields marked FIXED_ON_RESUME in
gigpo.config (the model and its adapter shape and scale, the environment, the estimator, the seed)."""
WHERE_IT_IS = ("trainer.run_dir",)
"""Where the run lies, not how it trains: a run directory that was moved resumes from its new place."""
ABSENT = "(absent)"


class ResumeConfigError(ValueError):
    """`--resume` with a setting that FIXED_KEYS keeps."""


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys; a leaf (or an empty section) is one value."""
    if not isinstance(data, dict) or (not data and prefix):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        # env.kwargs is the environment's own: compared whole, so a dropped kwarg reads as a change of kwargs
        flat.update({name: value} if name == "env.kwargs" else _flat(value, name))
    return flat


def config_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two configs as `Config.model_dump(mode="json")` gives them; a key
    one of them lacks (a config written by older code) reads as ABSENT there."""
    old, new = _flat(before), _flat(after)
    return {key: (old.get(key, ABSENT), new.get(key, ABSENT)) for key in sorted(old.keys() | new.keys())
            if old.get(key, ABSENT) != new.get(key, ABSENT) and key not in WHERE_IT_IS}


def check_resumed_config(config: Config, checkpoint: Path) -> Optional[Path]:
    """Compare `config` with the run directory's config.yaml before a resume from `checkpoint`: raise on a change
    to FIXED_KEYS, else keep the old file as config.to-iteration-<N>.yaml (returned) when anything changed,
    and say what did. None when the run has no config.yaml or nothing changed."""
    run_dir = Path(config.trainer.run_dir)
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return None
    changes = config_changes(yaml.safe_load(saved.read_text()) or {}, config.model_dump(mode="json"))
    iteration = int(checkpoint.name)
    fixed = {key: change for key, change in changes.items() if key in FIXED_KEYS}
    if fixed:
        listed = "; ".join(f"{key}: {old!r} there, {new!r} now" for key, (old, new) in fixed.items())
        raise ResumeConfigError(
            f"--resume of {run_dir} from iteration {iteration}: the run was trained with other settings that a resume "
            f"cannot change ({listed}). Resume with the run's own settings ({saved}), or train into a new "
            f"trainer.run_dir")
    if not changes:
        return None
    kept = run_dir / f"config.to-iteration-{iteration}.yaml"
    if not kept.exists():  # an earlier resume from the same checkpoint kept the settings that trained it
        shutil.copyfile(saved, kept)
    listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changes.items())
    print(f"gigpo: resuming {run_dir} from iteration {iteration} with changed settings: {listed}. The settings of "
          f"iterations 1..{iteration} are kept in {kept}", flush=True)
    return kept
