"""Open a run directory for the viewer: its metrics, config and the index of its rollout records.

A folder is a run when it holds metrics.jsonl or config.yaml (what `gigpo train` writes first). A run
without records/ still opens, with a notice saying what is missing and how to get it.
"""
from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gigpo.viewer.record_files import RECORDS_DIR, read_record_header

RECORD_FILE = re.compile(r"^(\d{6,})-(train|eval)\.jsonl\.gz$")
TABLE_KEYS = ("rollout/success", "rollout/return", "rollout/invalid_action_rate", "rollout/episode_length",
              "eval/success", "adv/step_groups", "adv/step_group_size_mean", "adv/step_group_size_max",
              "adv/singleton_row_share", "revisit/self_revisit_share", "adv/zero_advantage_share")
"""Metrics the iteration table shows (the curves are gigpo.experiments.plots.RUN_CURVES, as in curves.png)."""


class NotARunError(ValueError):
    """The folder given to `gigpo view` is not a gigpo run directory; the message says what to pass."""


@dataclass
class RunIndex:
    """Everything the overview needs (JSON-ready), and where each record file lies."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    records: list[dict[str, Any]]          # record headers (+ "name", "bytes"), by iteration then phase
    notices: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)

    def overview(self) -> dict[str, Any]:
        from gigpo.experiments.plots import RUN_CURVES

        return {"name": self.path.name, "path": str(self.path), "config": self.config, "metrics": self.metrics,
                "curves": [list(c) for c in RUN_CURVES], "table_keys": list(TABLE_KEYS), "records": self.records,
                "notices": self.notices}


def _config_summary(path: Path) -> dict[str, Any]:
    """The recipe values the viewer's title line shows (the full config stays in config.yaml)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    pick = {"algorithm": ("estimator", "gamma", "step_weight", "norm", "similarity"),
            "env": ("id", "num_groups", "group_size", "max_steps"), "model": ("path", "init"),
            "trainer": ("iterations",), "logging": ("rollouts_every",)}
    plain = (str, int, float, bool, type(None))
    return {f"{section}.{key}": v if isinstance(v := data[section][key], plain) else str(v)
            for section, keys in pick.items() for key in keys if isinstance(data.get(section), dict) and key in data[section]}


def _metrics(path: Path, keep: set[str]) -> list[dict[str, Any]]:
    """metrics.jsonl rows cut to the keys the viewer draws (a long run's full rows would weigh megabytes);
    a line cut short by a crash is skipped."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "iteration" in row:  # finite numbers only: JSON has no NaN (the page parses it)
            rows.append({k: v for k, v in row.items() if k == "iteration" or (
                k in keep and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))})
    return rows


def open_run(path: str | Path) -> RunIndex:
    """Index a run directory; raises NotARunError (a one-line message) for anything else."""
    from gigpo.experiments.plots import RUN_CURVES

    run = Path(path).expanduser()
    if not run.is_dir():
        raise NotARunError(f"{path} is not a directory; pass a run directory (the trainer.run_dir of a gigpo train run)")
    metrics_file, config_file = run / "metrics.jsonl", run / "config.yaml"
    if not metrics_file.is_file() and not config_file.is_file():
        raise NotARunError(f"{path} is not a gigpo run directory (no metrics.jsonl or config.yaml); pass the folder "
                           "that was trainer.run_dir, e.g. runs/sokoban_tiny")
    notices = []
    keep = {k for k, _ in RUN_CURVES} | set(TABLE_KEYS)
    metrics = _metrics(metrics_file, keep) if metrics_file.is_file() else []
    if not metrics:
        notices.append("no metrics.jsonl rows yet: curves and the iteration table are empty")
    records, files = [], {}
    record_dir = run / RECORDS_DIR
    for file in sorted(record_dir.glob("*.jsonl.gz")) if record_dir.is_dir() else []:
        match = RECORD_FILE.match(file.name)
        if not match:
            continue
        try:
            header = read_record_header(file)
        except (OSError, EOFError, ValueError, zlib.error) as exc:  # e.g. cut short by a full disk
            notices.append(f"{RECORDS_DIR}/{file.name} is unreadable ({exc}); skipped")
            continue
        name = file.name[: -len(".jsonl.gz")]
        records.append({**header, "name": name, "bytes": file.stat().st_size})
        files[name] = file
    if not files:
        notices.append(missing_records_notice(run))
    records.sort(key=lambda r: (r["iteration"], r["phase"]))
    config = _config_summary(config_file) if config_file.is_file() else {}
    return RunIndex(run, config, metrics, records, notices, files)


def missing_records_notice(run: Path) -> str:
    return (f"{run} has no rollout records ({RECORDS_DIR}/ is empty or missing): it was trained before records "
            "existed or with logging.rollouts_every=0, so only its metrics are shown; train with "
            "logging.rollouts_every=N to record episodes")


def record_bytes(index: RunIndex, name: str) -> Optional[bytes]:
    """The gzipped JSONL of record `name` as stored (None if the run has no such record)."""
    file = index.files.get(name)
    return file.read_bytes() if file is not None else None
