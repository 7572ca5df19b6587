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
