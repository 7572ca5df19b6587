"""Rollout records for `gigpo view`: a bounded, gzipped JSONL snapshot of one iteration's episodes.

The trainer writes RUN_DIR/records/{iteration:06d}-{phase}.jsonl.gz, where phase is "train" (the
episodes the update used, with their advantages; every `logging.rollouts_every` iterations and the
last) or "eval" (the greedy evaluation episodes, no advantages; at every evaluation). Line 1 is a
header, every further line one trajectory with its steps in order:

    {"kind": "header", "format": 1, "iteration": 40, "phase": "train", "estimator": "gigpo", "gamma": 0.95,
     "groups_total": 16, "groups_kept": 16, "trajs_kept": 128, "steps_total": 601, "steps_kept": 601,
     "seeds": [...], "max_bytes": 8000000, "max_chars": 1000, ...}
    {"kind": "traj", "group": 3, "traj": 25, "seed": 1234, "won": true, "return": 0.8, "length": 4,
     "invalid_steps": 0, "task_type": "", "error": null, "steps": [STEP, ...]}

    STEP = {"t": 0, "obs": "...", "response": "...", "action": "left" | null, "valid": true, "reason": "",
            "reward": -0.1, "return": 0.7, "anchor": "9f1c...", "sg": 12, "sg_size": 5,
            "adv_episode": 0.3, "adv_step": -0.2, "adv": 0.1, "value": null, "version": 39, "cut": false}

The header names every advantage option the update used (estimator, gamma, lam, step_weight, norm, episode_stats,
similarity, step_min_spread, split_versions, hgpo_*, graph_*), so `gigpo advantage` can repeat it.
`return` is the discounted return R_t; `sg` numbers the step groups of the record (rows of one group
with the same anchor, or similar anchor text under algorithm.similarity: the grouping GiGPO uses, and
would use for the other estimators); `adv*` are the estimator's parts as the update used them (null
in eval records, and where the estimator has no such part: GRPO's and RLOO's step part, PPO's both).
Numbers are rounded to 6 decimals. Size is bounded by `logging.rollouts_max_mb` of JSON before gzip:
whole groups are kept in order while they fit, and the header counts the rest. Besides the viewer,
`gigpo advantage` reads a record's step rows back (`record_step_rows`) to score them with any estimator.
"""
from __future__ import annotations

import gzip
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

FORMAT = 1
ABSENT_PARTS = {"grpo": ("step_advantage",), "rloo": ("step_advantage",), "ppo": ("episode_advantage", "step_advantage")}
"""Advantage parts an estimator does not have (its scored rows hold zeros there): recorded as null."""
RECORDS_DIR = "records"
PHASES = ("train", "eval")


def record_name(iteration: int, phase: str) -> str:
    """The file stem of a record (what the viewer's URLs name): e.g. 000040-train."""
    return f"{iteration:06d}-{phase}"


def cut_text(text: str, max_chars: int) -> tuple[str, bool]:
    """`text` shortened to about max_chars by dropping its middle (start and end say the most), and whether it was."""
    if len(text) <= max_chars:
        return text, False
    keep = max(max_chars - 24, 2)
    head, tail = keep // 2, keep - keep // 2
    return f"{text[:head]} …[{len(text) - keep} chars cut]… {text[len(text) - tail:]}", True


def _num(x: Any) -> Optional[float]:
    """A JSON-safe rounded float (None for missing or non-finite values, which JSON cannot hold)."""
    if x is None:
        return None
    x = float(x)
    return round(x, 6) if math.isfinite(x) else None


def step_columns(rows: Any, gamma: float, similarity: Optional[float], split_versions: bool,
                 estimator: str = "") -> dict[str, Optional[list]]:
    """The record's per-step values of `rows` (a StepRows), as lists in the rows' order: the discounted
    return R_t and the step groups (the estimators' own functions, on the rows and anchor keys the estimator
    used), and the advantage parts of scored rows (None for rollout rows, and for the parts `estimator`
    does not have)."""
    from gigpo.advantage.estimators import step_groups

    returns = rows.layout.reverse_discounted_sum(rows.reward, gamma)
    group_of_step, _ = step_groups(rows, rows.layout, similarity, split_versions)
    absent = ABSENT_PARTS.get(estimator, ())
    parts = {name: None if getattr(rows, name) is None or name in absent else getattr(rows, name).tolist()
             for name in ("advantage", "episode_advantage", "step_advantage", "value")}
    return {"return": returns.tolist(), "sg": group_of_step.tolist(), **parts}


def build_record(header: dict[str, Any], rows: Any, episodes: Sequence[Any], columns: dict[str, Optional[list]],
                 max_bytes: int, max_chars: int) -> list[str]:
    """The record's JSON lines (header first): whole groups in group order while they fit in max_bytes.
    `rows` is a StepRows with the rollout's texts; `columns` its step_columns()."""
    step_group = columns["sg"]
    sg_size = (np.bincount(step_group)[step_group] if len(rows) else np.zeros(0, dtype=np.int64)).tolist()
    group, traj, step, reward = rows.group.tolist(), rows.traj.tolist(), rows.step.tolist(), rows.reward.tolist()
    valid = rows.action_valid.tolist() if len(rows) else []
    truncated = rows.truncated_response.tolist() if len(rows) else []
    anchor, version = rows.anchor.tolist(), rows.policy_version.tolist() if len(rows) else []
    by_traj: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in range(len(rows)):
        by_traj[(group[i], traj[i])].append(i)
    episode_of = {(e.group, e.traj): e for e in episodes}
    groups: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for key in sorted(by_traj):
        groups[key[0]].append(key)

    def parts(name: str, i: int) -> Optional[float]:
        return None if columns[name] is None else _num(columns[name][i])

    def step_json(i: int) -> dict[str, Any]:
        obs, obs_cut = cut_text(rows.observation[i], max_chars)
        response, response_cut = cut_text(rows.response[i], max_chars)
        action = rows.action[i]
        return {"t": step[i], "obs": obs, "response": response, "action": None if action is None else str(action),
                "valid": valid[i], "reason": rows.invalid_reason[i], "reward": _num(reward[i]),
                "return": _num(columns["return"][i]), "anchor": f"{anchor[i] & (2**64 - 1):016x}", "sg": step_group[i],
                "sg_size": sg_size[i], "adv_episode": parts("episode_advantage", i),
                "adv_step": parts("step_advantage", i), "adv": parts("advantage", i), "value": parts("value", i),
                "version": version[i], "cut": obs_cut or response_cut, "truncated_response": truncated[i]}

    def traj_json(key: tuple[int, int]) -> dict[str, Any]:
        mine = sorted(by_traj[key], key=lambda i: step[i])
        e = episode_of.get(key)
        summary = ({"seed": e.seed, "won": bool(e.won), "return": _num(e.episode_return), "length": e.length,
                    "invalid_steps": e.invalid_steps, "task_type": e.task_type, "error": e.error} if e is not None else
                   {"seed": None, "won": None, "return": _num(sum(reward[i] for i in mine)), "length": len(mine),
                    "invalid_steps": sum(not valid[i] for i in mine), "task_type": "", "error": None})
        return {"kind": "traj", "group": int(key[0]), "traj": int(key[1]), **summary,
                "steps": [step_json(i) for i in mine]}

    lines: list[str] = []
    used = 0
    kept_groups, seeds = 0, []
    trajs_kept = steps_kept = 0
    budget = max_bytes - 4096  # room for the header, written last
    for group, keys in groups.items():
        group_lines = [json.dumps(traj_json(k), ensure_ascii=False) + "\n" for k in keys]
        size = sum(len(line.encode("utf-8")) for line in group_lines)
        if used + size > budget:
            break  # groups stay whole: a group view needs all its trajectories
        lines += group_lines
        used += size
        kept_groups += 1
        trajs_kept += len(keys)
        steps_kept += sum(len(by_traj[k]) for k in keys)
        first = episode_of.get(keys[0])
        seeds.append(first.seed if first is not None else None)
    head = {"kind": "header", "format": FORMAT, **header, "groups_total": len(groups), "groups_kept": kept_groups,
            "trajs_kept": trajs_kept, "steps_total": len(rows), "steps_kept": steps_kept, "seeds": seeds,
            "max_bytes": max_bytes, "max_chars": max_chars}
    return [json.dumps(head) + "\n", *lines]


def write_record(path: Path, lines: Iterable[str]) -> Path:
    """Write gzipped lines atomically (a crash leaves the old file or none, never half a record)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as f:
        f.writelines(lines)
    os.replace(tmp, path)
    return path


def _checked_header(path: Path, first: Any) -> dict[str, Any]:
    if not isinstance(first, dict) or first.get("kind") != "header":
        raise ValueError(f"{path}: not a rollout record (its first line is not a record header)")
    return first


def read_record_header(path: Path) -> dict[str, Any]:
    """A record's header alone (the viewer's index of a long run reads every record's)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return _checked_header(path, json.loads(f.readline() or "null"))


def read_record(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A record's header and its trajectory lines; ValueError naming the file when it is not a record."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return _checked_header(path, lines[0] if lines else None), lines[1:]


def record_step_rows(path: Path) -> tuple[dict[str, Any], Any]:
    """The header and step rows of a record (group, trajectory, step, reward, anchor key, policy version, and the
    critic's value where every step has one), in the record's order: what `gigpo advantage` needs to score a
    run's recorded episodes again, with the estimator they were trained with or another."""
    from gigpo.advantage.rows import StepRows

    header, trajs = read_record(path)
    steps = [(tr["group"], tr["traj"], st) for tr in trajs for st in tr["steps"]]
    values = [st.get("value") for _, _, st in steps]
    rows = StepRows(
        group=np.asarray([g for g, _, _ in steps], dtype=np.int64),
        traj=np.asarray([t for _, t, _ in steps], dtype=np.int64),
        step=np.asarray([st["t"] for _, _, st in steps], dtype=np.int64),
        reward=np.asarray([st["reward"] for _, _, st in steps], dtype=np.float64),
        anchor=np.asarray([int(st["anchor"], 16) for _, _, st in steps], dtype=np.uint64),
        policy_version=np.asarray([st["version"] for _, _, st in steps], dtype=np.int64),
        value=np.asarray(values, dtype=np.float64) if steps and None not in values else None,
    )
    return header, rows


@dataclass
class RolloutRecorder:
    """What the training loop calls; holds the logging settings and the values a record header names."""

    run_dir: Path
    every: int
    max_bytes: int
    max_chars: int
    gamma: float
    similarity: Optional[float]
    split_versions: bool
    """Step groups split by policy version, as the estimator's (rollout.group_versions=separate)."""
    header: dict[str, Any]

    @classmethod
    def from_config(cls, config: Any, run_dir: Path) -> "RolloutRecorder":
        lg, a, e = config.logging, config.algorithm, config.env
        from gigpo.advantage.estimators import advantage_options

        split_versions = config.rollout.group_versions != "mixed"
        header = {"estimator": a.estimator, **advantage_options(a, split_versions),
                  "env": e.id, "group_size": e.group_size, "max_steps": e.max_steps}
        return cls(Path(run_dir), lg.rollouts_every, int(lg.rollouts_max_mb * 1e6), lg.rollouts_max_chars, a.gamma,
                   a.similarity, split_versions, header)

    def path(self, iteration: int, phase: str) -> Path:
        return self.run_dir / RECORDS_DIR / f"{record_name(iteration, phase)}.jsonl.gz"

    def _write(self, iteration: int, phase: str, rows: Any, episodes: Sequence[Any]) -> Optional[Path]:
        header = {**self.header, "iteration": iteration, "phase": phase}
        if phase == "eval":
            header["group_size"] = 1
        try:
            columns = step_columns(rows, self.gamma, self.similarity, self.split_versions, self.header["estimator"])
            lines = build_record(header, rows, episodes, columns, self.max_bytes, self.max_chars)
            return write_record(self.path(iteration, phase), lines)
        except Exception as exc:  # a record is a diagnostic: never lose a training run over it (a full disk, ...)
            print(f"gigpo: the {phase} rollout record of iteration {iteration} failed ({type(exc).__name__}: {exc}); "
                  "training goes on", flush=True)
            return None

    def after_advantage(self, iteration: int, last: bool, rows: Any, episodes: Sequence[Any]) -> Optional[Path]:
        """Record the update's episodes when due (every `rollouts_every` iterations, and the last), from the
        rows the estimator scored (a StepRows with the rollout's texts)."""
        if not self.every or not (iteration % self.every == 0 or last):
            return None
        used = set(rows.group.tolist())  # dynamic sampling may have dropped groups from the update
        return self._write(iteration, "train", rows, [e for e in episodes if e.group in used])

    def eval_hook(self, iteration: int) -> Optional[Callable[[Any], None]]:
        """The `on_rollout` callback for evaluate(): records the evaluation's episodes (None when records are off)."""
        if not self.every:
            return None

        def record(result: Any) -> None:
            self._write(iteration, "eval", result.steps, result.episodes)

        return record
