"""The step-row JSONL format shared by `gigpo advantage`, the trainer's rollout dumps, and users.

Input, one JSON object per line (blank lines are skipped):
    {"group": 3 | "task-3", "traj": 0 | "a", "step": 0, "reward": 0.0, "anchor": "text" | 123, "value": 0.5}
`value` is optional (PPO needs it on every row). `anchor` is either the anchor text (hashed here with
anchors.anchor_key, and kept for similarity grouping) or an already hashed integer key, the same
kind on every line. Output, one line per input row in input order:
    {"advantage": ..., "episode_advantage": ..., "step_advantage": ..., "step_group_size": ...}
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any, Iterable, TextIO, Union

import numpy as np

from gigpo.advantage.anchors import anchor_key
from gigpo.advantage.rows import AdvantageInputError, StepRows

REQUIRED_FIELDS = ("group", "traj", "step", "reward", "anchor")
PathOrFile = Union[str, Path, TextIO]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class _Labels:
    """Dense ints for group/traj labels that may be strings or ints (first-seen order)."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}

    def __call__(self, label: Any) -> int:
        return self.ids.setdefault((type(label).__name__, label), len(self.ids))


def parse_step_rows(lines: Iterable[str], source: str = "<input>") -> StepRows:
    """StepRows from JSONL lines; errors name the source and line number."""
    groups, trajs, steps, rewards, anchors, texts, values = [], [], [], [], [], [], []
    group_ids, traj_ids = _Labels(), _Labels()
    anchor_kind = None
    value_lines: list[int] = []
    no_value_lines: list[int] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AdvantageInputError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise AdvantageInputError(f"{where}: each line must be a JSON object, got {type(record).__name__}")
        missing = [f for f in REQUIRED_FIELDS if f not in record]
        if missing:
            raise AdvantageInputError(
                f"{where}: missing field(s) {', '.join(missing)}; each row needs {', '.join(REQUIRED_FIELDS)}"
            )
        for name in ("group", "traj"):
            if not (isinstance(record[name], str) or _is_int(record[name])):
                raise AdvantageInputError(f"{where}: {name}={record[name]!r} must be a string or an integer")
        if not _is_int(record["step"]):
            raise AdvantageInputError(f"{where}: step={record['step']!r} must be an integer")
        if not _is_number(record["reward"]) or not math.isfinite(record["reward"]):
            raise AdvantageInputError(f"{where}: reward={record['reward']!r} must be a finite number")
        anchor = record["anchor"]
        kind = "text" if isinstance(anchor, str) else "key" if _is_int(anchor) else None
        if kind is None:
            raise AdvantageInputError(f"{where}: anchor={anchor!r} must be the anchor text or its integer key")
        if anchor_kind is None:
            anchor_kind = kind
        elif kind != anchor_kind:
            here = "text" if kind == "text" else "an integer key"
            before = "text" if anchor_kind == "text" else "integer keys"
            raise AdvantageInputError(f"{where}: anchor is {here} here but {before} on earlier lines; use one kind")
        groups.append(group_ids(record["group"]))
        trajs.append(traj_ids(record["traj"]))
        steps.append(record["step"])
        rewards.append(record["reward"])
        if kind == "text":
            texts.append(anchor)
            anchors.append(anchor_key(anchor))
        else:
            if not -(2**63) <= anchor < 2**64:
                raise AdvantageInputError(f"{where}: anchor key {anchor} does not fit in 64 bits")
            anchors.append(anchor - 2**64 if anchor >= 2**63 else anchor)
        if "value" in record and record["value"] is not None:
            if not _is_number(record["value"]) or not math.isfinite(record["value"]):
                raise AdvantageInputError(f"{where}: value={record['value']!r} must be a finite number")
            values.append(record["value"])
            value_lines.append(lineno)
        else:
            no_value_lines.append(lineno)
    if value_lines and no_value_lines:
        shown = ", ".join(str(n) for n in no_value_lines[:5])
        raise AdvantageInputError(
            f"{source}: 'value' is given on some lines but missing on lines {shown}; give it on all or none"
        )
    try:
        return StepRows(
            group=np.asarray(groups, dtype=np.int64), traj=np.asarray(trajs, dtype=np.int64),
            step=np.asarray(steps, dtype=np.int64), reward=np.asarray(rewards, dtype=np.float64),
            anchor=np.asarray(anchors, dtype=np.int64),
            value=np.asarray(values, dtype=np.float64) if value_lines else None,
            anchor_text=texts if anchor_kind == "text" else None,
        )
    except AdvantageInputError as exc:
        raise AdvantageInputError(f"{source}: {exc} (rows are numbered from 0 in input order)") from None


GZIP_MAGIC = b"\x1f\x8b"


def open_text(path: Union[str, Path]) -> TextIO:
    """A file's UTF-8 text, gunzipped when it is gzip (the trainer's records are; a user may compress a dump)."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == GZIP_MAGIC
    return gzip.open(path, "rt", encoding="utf-8") if gzipped else open(path, encoding="utf-8")


def read_step_rows(path: PathOrFile) -> StepRows:
    """Read the step-row JSONL format from a path (plain or gzipped) or an open text file."""
    if isinstance(path, (str, Path)):
        with open_text(path) as f:
            try:
                return parse_step_rows(f, str(path))
            except UnicodeDecodeError:
                raise AdvantageInputError(f"{path}: not UTF-8 text; the input is step rows as JSON lines, plain "
                                          "or gzipped") from None
    return parse_step_rows(path, getattr(path, "name", "<input>"))


def _write_lines(path: PathOrFile, lines: Iterable[str]) -> None:
    if isinstance(path, (str, Path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # the trainer's RUN_DIR/rollouts/ on first use
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines)
    else:
        path.writelines(lines)


def write_step_rows(path: PathOrFile, rows: StepRows) -> None:
    """Write rows in the input format (anchor text when the rows carry it, else the integer key)."""
    def lines() -> Iterable[str]:
        for i in range(len(rows)):
            record: dict[str, Any] = {
                "group": int(rows.group[i]), "traj": int(rows.traj[i]), "step": int(rows.step[i]),
                "reward": float(rows.reward[i]),
                "anchor": rows.anchor_text[i] if rows.anchor_text is not None else int(rows.anchor[i]),
            }
            if rows.value is not None:
                record["value"] = float(rows.value[i])
            yield json.dumps(record) + "\n"
    _write_lines(path, lines())


def write_advantages(path: PathOrFile, result: StepRows) -> None:
    """Write one output line per row of scored rows (compute_advantages' output), in the rows' input order."""
    columns = zip(result.advantage.tolist(), result.episode_advantage.tolist(),
                  result.step_advantage.tolist(), result.step_group_size.tolist())
    _write_lines(path, (
        json.dumps({"advantage": a, "episode_advantage": e, "step_advantage": s, "step_group_size": n}) + "\n"
        for a, e, s, n in columns
    ))


def read_advantages(path: PathOrFile) -> dict[str, np.ndarray]:
    """Read an output file back into (N,) arrays keyed by field name."""
    handle = open(path, encoding="utf-8") if isinstance(path, (str, Path)) else path
    try:
        records = [json.loads(line) for line in handle if line.strip()]
    finally:
        if handle is not path:
            handle.close()
    return {
        "advantage": np.asarray([r["advantage"] for r in records], dtype=np.float64),
        "episode_advantage": np.asarray([r["episode_advantage"] for r in records], dtype=np.float64),
        "step_advantage": np.asarray([r["step_advantage"] for r in records], dtype=np.float64),
        "step_group_size": np.asarray([r["step_group_size"] for r in records], dtype=np.int64),
    }
