"""docs/metrics.md and what a real run logs name the same metrics.

One tiny run switches on what the CPU can: PPO (critic), a KL penalty, dynamic sampling, evaluation
every iteration and a warm-started policy that acts (so the action-token statistics exist). Every key of
its metrics.jsonl must match a documented name, and every documented name must be logged, except
those the doc itself marks as conditional on something this run cannot have (`NOT_IN_THIS_RUN`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from support.run import REPO, WARM, train

#: Documented names this run cannot produce, and why (each is a condition the doc states).
NOT_IN_THIS_RUN = {
    "rollout/sync_gap_max": "rollout.verify_sync needs the vllm backend",
    "rollout/success/<task type>": "Sokoban reports no task types",
    "eval/success/<type>": "Sokoban reports no task types",
    "perf/peak_gpu_gb/<phase>": "CUDA only",
    "perf/gpu_free_gb/<phase>": "CUDA only (memory phases)",
    "time/phase_<phase>": "CUDA only (memory phases)",
    "env/*": "no env faults happen",
    "async/staleness_max": "rollout.mode=async only (tests/trainer/test_async_mode.py checks them)",
    "async/staleness_mean": "rollout.mode=async only",
    "correction/weight_mean": "algorithm.rollout_correction on only (test_rollout_correction.py checks them)",
    "correction/truncated_share": "algorithm.rollout_correction on only",
    "correction/masked_share": "algorithm.rollout_correction on only",
    "correction/kl_k3": "algorithm.rollout_correction on only",
    "adv/step_group_size/<k>": "matched by its expansion adv/step_group_size/1.. below",
}


def documented_names(doc: str) -> list[str]:
    """The backticked names in the first column of docs/metrics.md's `| key | meaning |` table."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.replace(" ", "") == "|key|meaning|")
    names = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break  # the end of the table
        names += re.findall(r"`([^`]+)`", line.split("|")[1])
    return names


def as_pattern(name: str) -> re.Pattern:
    """`perf/peak_rss_gb/<phase>` -> one path segment for <...>; `adv/episode_advantage_*`, `env/*` -> any rest."""
    parts = re.split(r"(<[^>]+>|\*)", name)
    regex = "".join("[^/]+" if p.startswith("<") else ".+" if p == "*" else re.escape(p) for p in parts)
    return re.compile(regex + "$")


def test_documented_metric_names_are_the_logged_ones(tmp_path: Path) -> None:
    names = documented_names((REPO / "docs" / "metrics.md").read_text())
    assert len(names) > 40 and "rollout/success" in names
    run = tmp_path / "metrics"
    train(run, *WARM, "algorithm.estimator=ppo", "algorithm.kl_coef=0.01", "algorithm.dynamic_sampling=true",
          "env.group_size=4", "trainer.iterations=1", "trainer.eval_every=1")
    logged = set()
    for line in (run / "metrics.jsonl").read_text().splitlines():
        logged |= set(json.loads(line)) - {"iteration"}
    patterns = {name: as_pattern(name) for name in names}
    # "eval/...": the rollout metrics again, on the evaluation seeds
    patterns.update({f"eval{n[len('rollout'):]}": as_pattern(f"eval{n[len('rollout'):]}")
                     for n in names if n.startswith("rollout/")})
    undocumented = sorted(k for k in logged if not any(p.match(k) for p in patterns.values()))
    assert not undocumented, f"logged but not in docs/metrics.md: {undocumented}"
    never_logged = sorted(n for n in names if n not in NOT_IN_THIS_RUN and not n.endswith("...")
                          and not any(patterns[n].match(k) for k in logged))
    assert not never_logged, f"in docs/metrics.md but not logged by a run that should: {never_logged}"
