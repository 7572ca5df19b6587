"""A warm-started run logs the per-action diagnostics and the generator/trainer log-prob gap (issue 24)."""
from __future__ import annotations

from pathlib import Path

from support.run import WARM, metrics_of, train

# the suite's shared warm-up (cached once per machine) teaches the answer format, so responses hold tagged
# actions the diagnostics can find
SIZES = ["env.num_groups=3", "env.group_size=4", "trainer.mini_batch_size=null", "trainer.mini_batches=4"]


def test_a_run_logs_action_token_kl_clip_and_the_log_prob_gap(tmp_path: Path) -> None:
    train(tmp_path / "run", *WARM, *SIZES, "trainer.iterations=2")
    trained = [r for r in metrics_of(tmp_path / "run") if r["iteration"] > 0]
    assert len(trained) == 2
    for record in trained:
        # the hf/fp32/temperature-1 default takes old log-probs from the generator: the gap comes from a probe
        assert 0.0 <= record["rollout/logp_gap_mean"] <= record["rollout/logp_gap_max"] < 1e-3
        for key in ("loss/action_kl", "loss/action_clip_frac", "loss/action_entropy", "loss/action_approx_kl_old"):
            assert key in record, (key, sorted(record))
        assert 0.0 <= record["loss/action_clip_frac"] <= 1.0 and record["loss/action_kl"] >= 0.0
        # one token of an answer's ~7 is the move: its entropy is not the format tokens' near-zero one
        assert record["loss/action_entropy"] > record["loss/entropy"]
        assert record["actor/optimizer_steps"] == 4.0  # trainer.mini_batches, whatever the episode lengths
