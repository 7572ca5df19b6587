"""Paired statistics against hand computations and scipy; the paired design's seed and warm-up rules."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from gigpo.config import load_config
from gigpo.experiments.compare import (RunResult, format_p, mean_curve_efficiency, paired_efficiency, phase_means,
                                       welch_test)
from gigpo.experiments.paired import mean_band, paired_stats, t_interval
from gigpo.infra.seeds import train_seeds


def test_t_interval_matches_the_textbook_formula():
    values = [0.1, 0.3, 0.2, 0.6]
    mean, low, high = t_interval(values)
    s = math.sqrt(sum((v - 0.3) ** 2 for v in values) / 3)       # sample std, n - 1 = 3
    half = 3.182446305284263 * s / 2                              # t_{0.975, 3} * s / sqrt(4)
    assert mean == pytest.approx(0.3) and low == pytest.approx(0.3 - half) and high == pytest.approx(0.3 + half)
    assert math.isnan(t_interval([0.4])[1]) and t_interval([0.4])[0] == 0.4


def test_paired_stats_take_differences_seed_by_seed():
    a = {0: 0.40, 1: 0.35, 2: 0.50, 3: 0.31, 4: 0.47, 5: 0.9}
    b = {0: 0.30, 1: 0.33, 2: 0.41, 3: 0.33, 4: 0.40, 6: 0.1}   # seeds 5 and 6 have no partner
    st = paired_stats(a, b)
    assert st.seeds == [0, 1, 2, 3, 4]
    assert st.diffs == pytest.approx([0.10, 0.02, 0.09, -0.02, 0.07])
    assert st.mean == pytest.approx(0.052)
    ref = stats.ttest_rel([0.40, 0.35, 0.50, 0.31, 0.47], [0.30, 0.33, 0.41, 0.33, 0.40])
    assert st.t == pytest.approx(ref.statistic) and st.p_t == pytest.approx(ref.pvalue)
    # the paired t statistic is the mean difference over its standard error
    assert st.t == pytest.approx(0.052 / (np.std(st.diffs, ddof=1) / math.sqrt(5)))
    # the CI excludes 0 exactly when the two-sided t-test rejects at 5%
    assert (st.ci_low > 0) == (st.p_t < 0.05)
    # ties in |d| (0.02 twice) make scipy use its normal approximation: compare with scipy on the same differences
    assert st.p_wilcoxon == pytest.approx(stats.wilcoxon(st.diffs).pvalue)


def test_wilcoxon_exact_value_without_ties_and_none_when_too_few_pairs():
    st = paired_stats({s: 0.5 for s in range(6)}, {s: 0.5 - 0.01 * (s + 1) for s in range(6)})
    assert st.p_wilcoxon == pytest.approx(2 / 2 ** 6)    # all 6 differences positive: exact two-sided p = 2/64
    assert paired_stats({0: 0.5, 1: 0.4}, {0: 0.3, 1: 0.35}).p_wilcoxon is None
    same = paired_stats({0: 0.5, 1: 0.4}, {0: 0.4, 1: 0.3})           # equal differences: no spread, no t-test
    assert same.mean == pytest.approx(0.1) and math.isnan(same.p_t)


def test_welch_test_is_quiet_and_exact_when_one_side_has_no_spread():
    # one side's seeds ending on the same success rate is common (rates are multiples of 1/episodes);
    # scipy warns of precision loss there, but the statistic comes from the other side's spread alone
    a, b = [0.29, 0.27], [0.26, 0.26]
    t = (0.28 - 0.26) / math.sqrt(np.var(a, ddof=1) / 2)
    p = 2 * stats.t.sf(t, df=1)          # Welch-Satterthwaite degrees of freedom: n_a - 1 when b has no spread
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = welch_test(a, b)
    assert text == f"Welch t = {t:.2f}, p = {p:.3f} (n = 2 vs 2 seeds)"


def test_p_values_below_a_thousandth_are_printed_with_their_size_not_as_zero():
    # issue 25's short task: both seed-0 runs kept every warm-up room and gained 66, lost none
    p = stats.binomtest(66, 66).pvalue
    assert p < 1e-19 and format_p(p) != "0.000"
    assert float(format_p(p)) == pytest.approx(p, rel=0.05)
    assert format_p(0.0456) == "0.046" and format_p(0.001) == "0.001" and format_p(1.0) == "1.000"
    assert float(format_p(0.000987)) == pytest.approx(0.000987, rel=0.05)
    assert format_p(None) == "n/a" and format_p(float("nan")) == "n/a"


def test_mean_band_interpolates_each_curve_then_takes_the_t_interval():
    curves = [([0, 10], [0.0, 1.0]), ([0, 5, 10], [0.0, 0.8, 0.8]), ([0, 20], [0.2, 0.2])]
    mean, low, high = mean_band(curves, np.array([5.0]))
    at5 = [0.5, 0.8, 0.2]
    assert mean[0] == pytest.approx(0.5) and (low[0], high[0]) == pytest.approx(t_interval(at5)[1:])


def run(seed, steps, success):
    return RunResult("x", seed, steps, success, iter_seconds=1.0, peak_rss_gb=1.0)


def test_paired_efficiency_per_seed_and_on_the_mean_curves():
    grpo = [run(0, [0, 1000, 2000], [0.2, 0.3, 0.4]), run(1, [0, 1000, 2000], [0.2, 0.2, 0.1])]
    gigpo = [run(0, [0, 1000, 2000], [0.2, 0.45, 0.5]), run(1, [0, 1000, 2000], [0.2, 0.3, 0.3])]
    rows = paired_efficiency(gigpo, grpo)
    assert rows[0]["reach"] == 1000 and rows[0]["ratio"] == 0.5
    assert rows[0]["slow_reach"] == 2000 and rows[0]["ratio_own"] == 0.5        # grpo rose to its very end
    assert not rows[1]["gained"] and math.isnan(rows[1]["ratio"]) and math.isnan(rows[1]["ratio_own"])
    overall = mean_curve_efficiency(gigpo, grpo)
    # mean gigpo curve: 0.2 + 0.175 * x / 1000 up to 1000; target = mean grpo final = 0.25 -> x = 2000 / 7
    assert overall["target"] == pytest.approx(0.25) and overall["reach"] == pytest.approx(2000 / 7, rel=1e-9)
    assert overall["ratio"] == pytest.approx(1 / 7, rel=1e-9)


def test_a_mean_curve_that_touches_the_target_at_one_evaluation_reaches_it_there():
    # issue 25's short task, seed 0: GiGPO hit GRPO's final 61.0% at iteration 50, dipped to 60.3%, came back;
    # a 400-point grid fell between the evaluations and put the reach at iteration 70's step count
    steps = [0, 2043, 4021, 6150, 8262, 10457, 12430, 14302, 15965]
    gigpo = [run(0, steps, [117 / 300, 0.413, 0.403, 0.39, 0.42, 183 / 300, 181 / 300, 183 / 300, 183 / 300])]
    grpo = [run(0, [0, 15841], [117 / 300, 183 / 300])]
    assert paired_efficiency(gigpo, grpo)[0]["reach"] == 10457
    # grpo reached its final 61.0% at iteration 50 too: against that first reach, not its whole run, no saving
    plateau = [run(0, steps[:6] + [15841], [117 / 300, 0.52, 0.417, 0.393, 0.49, 183 / 300, 183 / 300])]
    row = paired_efficiency(gigpo, plateau)[0]
    assert row["ratio"] == pytest.approx(10457 / 15841) and row["slow_reach"] == 10457 and row["ratio_own"] == 1.0
    assert mean_curve_efficiency(gigpo, grpo)["reach"] == 10457
    # two seeds that reach the mean target together at one shared evaluation, means taken in float
    gigpo2 = [run(0, [0, 1000, 2000], [0.1, 0.7, 0.6]), run(1, [0, 1000, 2000], [0.1, 0.2, 0.3])]
    grpo2 = [run(0, [0, 3000], [0.1, 0.7]), run(1, [0, 3000], [0.1, 0.2])]
    assert mean_curve_efficiency(gigpo2, grpo2)["reach"] == 1000


def test_the_report_gives_the_mean_cost_against_the_plateaued_baselines_own_first_reach_too():
    """Issue 25's short task: GRPO reached its 61.0% ceiling at iteration 50 and stayed there. The report's
    mean-curve and mean-over-seeds lines read about 0.65x of GRPO's whole run; each must also say that
    against GRPO's own first reach GiGPO saved nothing (1.00x)."""
    from gigpo.experiments.compare import paired_section

    steps = [0, 2043, 4021, 6150, 8262, 10457, 12430, 14302, 15965]
    gigpo = [run(0, steps, [117 / 300, 0.413, 0.403, 0.39, 0.42, 183 / 300, 181 / 300, 183 / 300, 183 / 300])]
    grpo = [run(0, steps, [117 / 300, 0.52, 0.417, 0.393, 0.49, 183 / 300, 183 / 300, 183 / 300, 183 / 300])]
    text = "\n".join(paired_section({"gigpo": gigpo, "grpo": grpo}, ("gigpo", "grpo")))
    mean_curves = next(line for line in text.splitlines() if line.startswith("- Mean curves"))
    assert "0.65x grpo's 15,965" in mean_curves and "1.00x the 10,457 at which grpo's own mean curve" in mean_curves
    mean_seeds = next(line for line in text.splitlines() if line.startswith("- Mean over seeds"))
    assert "0.65x of grpo's 15,965" in mean_seeds and "1.00x of the 10,457 grpo needed to first reach it" in mean_seeds


def test_phase_means_split_training_into_equal_stretches():
    records = [{"iteration": i, "revisit/multi_row_share": float(i)} for i in range(1, 9)] + [{"iteration": 9}]
    assert phase_means(records, "revisit/multi_row_share") == [1.5, 3.5, 5.5, 7.5]
    assert all(math.isnan(v) for v in phase_means(records, "missing/key"))


def test_every_algorithm_of_a_seed_draws_the_same_tasks_and_seeds_draw_different_ones():
    base = ["algorithm.dynamic_sampling=true", "algorithm.max_resample=2"]
    configs = {algo: load_config("recipes/sokoban_tiny.yaml", [*base, f"algorithm.estimator={algo}",
                                                                "algorithm.norm=mean" if algo == "gigpo" else "trainer.lr=1e-4"])
               for algo in ("gigpo", "grpo", "ppo")}
    for iteration in (1, 2, 50):
        for draw in range(3):
            schedules = {a: train_seeds(c, iteration, draw) for a, c in configs.items()}
            assert schedules["gigpo"] == schedules["grpo"] == schedules["ppo"]
    other_seed = load_config("recipes/sokoban_tiny.yaml", [*base, "trainer.seed=1"])
    drawn = {s for i in range(1, 200) for d in range(3) for s in train_seeds(configs["grpo"], i, d)}
    assert len(drawn) == 199 * 3 * 16                         # no task seed repeats within a run, re-draws included
    assert drawn.isdisjoint(s for i in range(1, 200) for d in range(3) for s in train_seeds(other_seed, i, d))


def test_no_efficiency_ratio_on_the_mean_curves_when_the_baseline_did_not_gain():
    grpo = [run(0, [0, 1000], [0.3, 0.3]), run(1, [0, 1000], [0.3, 0.2])]
    gigpo = [run(0, [0, 1000], [0.3, 0.5]), run(1, [0, 1000], [0.3, 0.4])]
    overall = mean_curve_efficiency(gigpo, grpo)
    assert overall["no_gain"] and math.isnan(overall["ratio"])


def test_variants_are_labels_with_their_own_overrides_and_bad_ones_are_named():
    from pathlib import Path

    from gigpo.experiments.compare import parse_variant, train_command

    name, estimator, extra = parse_variant("gigpo_mean=gigpo algorithm.norm=mean 'env.kwargs.solution_length=[2, 6]'")
    assert (name, estimator, extra) == ("gigpo_mean", "gigpo", ["algorithm.norm=mean", "env.kwargs.solution_length=[2, 6]"])
    cmd = train_command("r.yaml", Path("out/gigpo_mean-s1"), "gigpo_mean", 1, 100, ["trainer.lr=1e-4"],
                        {"gigpo_mean": ("gigpo", extra)})
    assert cmd[cmd.index("r.yaml") + 1:] == ["trainer.lr=1e-4", *extra, "algorithm.estimator=gigpo", "trainer.seed=1",
                                            "trainer.run_dir=out/gigpo_mean-s1", "trainer.max_env_steps=100"]
    assert "algorithm.estimator=grpo" in train_command("r.yaml", Path("x"), "grpo", 0, None, [])
    for bad in ("gigpo", "=gigpo", "a/b=gigpo", "x=gigpo norm"):
        with pytest.raises(ValueError, match="NAME=ESTIMATOR"):
            parse_variant(bad)
