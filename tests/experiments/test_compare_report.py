"""The numbers of a comparison report, on hand-made learning curves."""
from __future__ import annotations

import pytest

from gigpo.experiments.compare import (WARMUP_DIGEST_FILE, RunResult, efficiency_ratio, steps_to_reach, success_at,
                                       warmup_digest)


def run(algo: str, seed: int, steps: list[float], success: list[float]) -> RunResult:
    return RunResult(algo, seed, steps, success, iter_seconds=1.0, peak_rss_gb=1.0)


def test_budget_and_level_lookups_use_the_last_eval_within_the_budget_and_the_first_reaching_the_level():
    r = run("gigpo", 0, [0, 1000, 2000, 3000], [0.2, 0.35, 0.3, 0.5])
    assert success_at(r, 1999) == 0.35 and success_at(r, 2000) == 0.3 and success_at(r, 99999) == 0.5
    assert steps_to_reach(r, 0.3) == 1000 and steps_to_reach(r, 0.5) == 3000
    assert steps_to_reach(r, 0.6) != steps_to_reach(r, 0.6)  # nan: never reached


def test_efficiency_ratio_is_gigpo_steps_to_grpo_final_over_grpo_steps():
    runs = {"grpo": [run("grpo", s, [0, 1000, 2000, 4000], [0.2, 0.25, 0.3, 0.4]) for s in (0, 1)],
            "gigpo": [run("gigpo", 0, [0, 1000, 2000, 4000], [0.2, 0.3, 0.4, 0.5]),
                      run("gigpo", 1, [0, 1000, 2000, 4000], [0.2, 0.45, 0.5, 0.5])]}
    text = efficiency_ratio(runs)
    assert "after 1,500 env steps" in text and "0.38x of grpo's 4,000" in text  # (2000 + 1000) / 2 / 4000
    assert "0.38x of the 4,000 grpo needed to first reach it" in text           # grpo rose to its very end


def test_efficiency_ratio_against_a_baseline_that_plateaued_is_its_own_first_reach():
    """GRPO at a ceiling from its second evaluation on: GiGPO reaching it at the third costs half of GRPO's
    whole run but twice what GRPO itself needed; a GRPO seed that never reached the mean final gives no ratio."""
    plateau = [0.2, 0.5, 0.5, 0.5, 0.5]
    runs = {"grpo": [run("grpo", s, [0, 1000, 2000, 3000, 4000], plateau) for s in (0, 1)],
            "gigpo": [run("gigpo", s, [0, 1000, 2000, 3000, 4000], [0.2, 0.3, 0.5, 0.5, 0.5]) for s in (0, 1)]}
    text = efficiency_ratio(runs)
    assert "0.50x of grpo's 4,000" in text and "2.00x of the 1,000 grpo needed to first reach it" in text
    runs["grpo"][1] = run("grpo", 1, [0, 1000, 2000, 3000, 4000], [0.2, 0.3, 0.3, 0.3, 0.3])  # mean final 0.4
    text = efficiency_ratio(runs)
    assert "grpo itself reached it in 1/2 seeds" in text and "first reach it" not in text


def test_no_ratio_when_the_baseline_did_not_improve_on_its_start():
    runs = {"grpo": [run("grpo", 0, [0, 1000], [0.3, 0.25])], "gigpo": [run("gigpo", 0, [0, 1000], [0.3, 0.4])]}
    assert efficiency_ratio(runs).startswith("no ratio")


def test_smoothed_final_averages_the_last_three_evaluations_after_the_start():
    assert run("gigpo", 0, [0, 1, 2, 3, 4], [0.1, 0.9, 0.2, 0.3, 0.4]).final_smoothed == pytest.approx(0.3)
    assert run("gigpo", 0, [0, 1], [0.1, 0.5]).final_smoothed == 0.5   # the start never counts


def test_warmup_digest_from_the_weights_or_from_a_copied_record_without_them(tmp_path):
    run_dir, copy = tmp_path / "run", tmp_path / "copy"
    assert warmup_digest(run_dir) is None                                   # no warm-up: no digest
    (run_dir / "warmup" / "hf").mkdir(parents=True)
    (run_dir / "warmup" / "hf" / "model.safetensors").write_bytes(b"weights one")
    first = warmup_digest(run_dir)
    (run_dir / "warmup" / "hf" / "model.safetensors").write_bytes(b"weights two")
    assert warmup_digest(run_dir) != first                                  # the digest follows the bytes
    (copy / "warmup").mkdir(parents=True)                                   # docs/results keeps only the digest
    (copy / "warmup" / WARMUP_DIGEST_FILE).write_text(first + "\n")
    assert warmup_digest(copy) == first


def test_task_types_get_their_own_start_and_end_from_the_runs_evaluations(tmp_path):
    """Two ALFWorld-like runs: one type learned while the other is lost nets out in the mean, but not per type."""
    import json

    from gigpo.experiments.compare import load_run, run_dir_for, task_type_section

    curves = {0: ([0.5, 0.5, 0.6, 0.7, 0.8], [0.1, 0.1, 0.0, 0.0, 0.0]),
              1: ([0.4, 0.6, 0.6, 0.6, 0.6], [0.2, 0.2, 0.2, 0.2, 0.2])}
    for seed, (look, pick) in curves.items():
        run_dir = run_dir_for(tmp_path, "gigpo", seed)
        run_dir.mkdir(parents=True)
        lines = []
        for i, (a, b) in enumerate(zip(look, pick)):
            lines.append(json.dumps({"iteration": i * 5, "rollout/env_steps_total": i * 1000, "eval/success": (a + b) / 2,
                                     "eval/success/look_at": a, "eval/success/pick": b}))
            lines.append(json.dumps({"iteration": i * 5 + 1, "rollout/env_steps_total": i * 1000 + 200}))  # no eval
        (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    runs = {"gigpo": [load_run(tmp_path, "gigpo", s) for s in curves]}
    assert runs["gigpo"][0].task_types == {"look_at": curves[0][0], "pick": curves[0][1]}
    rows = {line.split(" | ")[1]: line for line in task_type_section(runs, ["gigpo"]) if line.startswith("| gigpo")}
    # look_at: starts 50 and 40 (45.0 ± 7.1), ends 70 and 60 (65.0 ± 7.1), changes +20 each (20.0 ± 0.0)
    assert rows["look_at"] == "| gigpo | look_at | 45.0 ± 7.1 | 65.0 ± 7.1 | 20.0 ± 0.0 |"
    # pick: seed 0 drops from 10 to 0, seed 1 holds at 20
    assert rows["pick"] == "| gigpo | pick | 15.0 ± 7.1 | 10.0 ± 14.1 | -5.0 ± 7.1 |"
    assert task_type_section({"grpo": [run("grpo", 0, [0, 1000], [0.2, 0.3])]}, ["grpo"]) == []  # no types: no section
