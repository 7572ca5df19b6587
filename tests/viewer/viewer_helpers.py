"""Shared by the viewer tests: synthetic rollouts through the real estimators, a written run, Chromium's path."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def synthetic_rollout(n_groups: int, group_size: int, length: int, seed: int = 0, states: int = 3,
                      obs_chars: int = 40, estimator: str = "gigpo", **options):
    """The steps (StepRows, as a rollout fills them) and EpisodeSummaries of a made-up env whose trajectories
    wander over `states` states per group (so states recur and step groups form), and the rows as the real
    estimator scored them (`options`: more of compute_advantages' keywords, e.g. hgpo_history)."""
    from gigpo.advantage.anchors import anchor_keys
    from gigpo.advantage.estimators import compute_advantages
    from gigpo.advantage.rows import StepRows
    from gigpo.rollout.collect import EpisodeSummary

    rng = np.random.default_rng(seed)
    steps, episodes = [], []
    for g in range(n_groups):
        for k in range(group_size):
            traj = g * group_size + k
            n = int(rng.integers(1, length + 1))
            won = bool(rng.random() < 0.4)
            first = len(steps)
            for t in range(n):
                state = int(rng.integers(0, states)) if t else 0
                valid = bool(rng.random() < 0.85)
                action = str(rng.choice(["up", "down", "left", "right"])) if valid else None
                obs = f"group {g} state {state} " + "#" * obs_chars
                steps.append(dict(group=g, traj=traj, step=t, prompt_ids=[1, 2], response_ids=[3],
                                  behaviour_logprobs=[-0.5], reward=(1.0 if won and t == n - 1 else -0.1),
                                  anchor_text=obs, action_valid=valid, truncated_response=False, observation=obs,
                                  response=f"<action>{action or '??'}</action>", action=action,
                                  invalid_reason="" if valid else "not an action", policy_version=3))
            episodes.append(EpisodeSummary(traj=traj, group=g, seed=100 + g, won=won,
                                           episode_return=sum(s["reward"] for s in steps[first:]), length=n,
                                           invalid_steps=sum(not s["action_valid"] for s in steps[first:]),
                                           task_type="", error=None))
    columns = {name: [s[name] for s in steps] for name in steps[0]}
    rows = StepRows(anchor=anchor_keys(columns["anchor_text"]), **columns)
    if estimator == "ppo":
        rows = replace(rows, value=rng.normal(size=len(steps)))
    result = compute_advantages(estimator, rows, **{**dict(gamma=0.95, lam=1.0, step_weight=1.0, norm="std",
                                episode_stats="trajectory", similarity=None, split_versions=True), **options})
    return rows, episodes, result


def make_recorder(run_dir: Path, estimator: str = "gigpo", algorithm: dict | None = None, **logging):
    """The trainer's recorder for a config with these `logging` keys and more `algorithm` keys (gamma 0.95,
    the default)."""
    from gigpo.config import Config
    from gigpo.viewer.record_files import RolloutRecorder

    config = Config.model_validate({"model": {"init": "tiny"}, "env": {"id": "gigpo/Sokoban-v0", "max_steps": 8},
                                    "algorithm": {"estimator": estimator, **(algorithm or {})}, "logging": logging})
    return RolloutRecorder.from_config(config, run_dir)


def write_run(run_dir: Path, iterations: int = 2) -> None:
    """The files `gigpo train` starts a run with (config, metrics) for a run made of synthetic records."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text("algorithm:\n  estimator: gigpo\nenv:\n  id: gigpo/Sokoban-v0\n")
    rows = [{"iteration": i, "rollout/success": 0.1 * i, "rollout/return": -0.5 + 0.2 * i, "adv/step_groups": 10.0 + i}
            for i in range(iterations + 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def chromium_path() -> str:
    """Debian's Chromium (installed by `make test` when missing), or a skip that says how to get it."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("the playwright package is missing: `pip install -e .[test]` (make install does it)")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium on PATH: `make test` installs Debian's chromium as root when apt-get is available; "
                    "run `apt-get install -y chromium`")
    return path
