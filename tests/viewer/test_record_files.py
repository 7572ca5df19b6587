"""Rollout records: what the trainer writes for `gigpo view`, checked against the estimators' own outputs."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from viewer_helpers import make_recorder, synthetic_rollout

from gigpo.viewer.record_files import cut_text, record_name


def read_lines(path: Path) -> tuple[dict, list[dict]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return lines[0], lines[1:]


def test_train_record_holds_each_steps_values_from_the_estimator(tmp_path: Path) -> None:
    from gigpo.advantage.estimators import step_groups

    steps, episodes, result = synthetic_rollout(n_groups=3, group_size=4, length=6, seed=1)
    recorder = make_recorder(tmp_path, rollouts_every=5)
    assert recorder.after_advantage(4, False, result, episodes) is None  # not due
    path = recorder.after_advantage(5, False, result, episodes)
    assert path == tmp_path / "records" / f"{record_name(5, 'train')}.jsonl.gz"
    header, trajs = read_lines(path)
    assert header["kind"] == "header" and header["iteration"] == 5 and header["phase"] == "train"
    assert (header["groups_kept"], header["groups_total"], header["steps_kept"]) == (3, 3, len(steps))
    assert header["seeds"] == [100, 101, 102]
    # every step row comes back once, with the estimator's values; JSON keeps 6 decimals, so the
    # tolerance is half a unit in the 6th decimal (plus float64 rounding of values up to ~10)
    sg, _ = step_groups(result, result.layout, None, split_versions=True)
    by_key = {key: i for i, key in enumerate(zip(steps.traj.tolist(), steps.step.tolist()))}
    seen = 0
    for tr in trajs:
        assert [st["t"] for st in tr["steps"]] == list(range(tr["length"]))  # in step order
        for st in tr["steps"]:
            i = by_key[(tr["traj"], st["t"])]
            for field, want in (("adv", result.advantage), ("adv_episode", result.episode_advantage),
                                ("adv_step", result.step_advantage), ("return", result.returns)):
                assert st[field] == pytest.approx(want[i], abs=5e-7 + 1e-14), field
            assert st["sg_size"] == result.step_group_size[i]
            assert st["action"] == steps.action[i] and st["valid"] == steps.action_valid[i]
            assert st["version"] == 3 and st["obs"] == steps.observation[i]
            assert st["anchor"] == f"{int(result.anchor[i]) & (2**64 - 1):016x}"  # the estimator's key
            seen += 1
        # step groups: two rows share "sg" exactly when the estimator put them in one group
    assert seen == len(steps)
    flat = [(tr["traj"], st["t"], st["sg"]) for tr in trajs for st in tr["steps"]]
    record_pairs = {(a[:2], b[:2]) for a in flat for b in flat if a[2] == b[2]}
    keys = list(by_key)
    estimator_pairs = {(keys[i], keys[j]) for i in range(len(steps)) for j in range(len(steps)) if sg[i] == sg[j]}
    assert record_pairs == estimator_pairs


def test_the_last_iteration_is_always_recorded_and_zero_records_nothing(tmp_path: Path) -> None:
    steps, episodes, result = synthetic_rollout(n_groups=1, group_size=2, length=3)
    assert make_recorder(tmp_path, rollouts_every=10).after_advantage(7, True, result, episodes)
    off = make_recorder(tmp_path / "off", rollouts_every=0)
    assert off.after_advantage(10, True, result, episodes) is None and off.eval_hook(10) is None
    assert not (tmp_path / "off").exists()


def test_size_bound_keeps_whole_groups_and_counts_the_rest(tmp_path: Path) -> None:
    steps, episodes, result = synthetic_rollout(n_groups=20, group_size=4, length=8, obs_chars=400)
    full = make_recorder(tmp_path / "full").after_advantage(10, False, result, episodes)
    full_bytes = len(gzip.decompress(full.read_bytes()))
    bound = full_bytes // 3
    path = make_recorder(tmp_path / "cut", rollouts_max_mb=bound / 1e6).after_advantage(10, False, result, episodes)
    header, trajs = read_lines(path)
    assert len(gzip.decompress(path.read_bytes())) <= bound
    assert 0 < header["groups_kept"] < header["groups_total"] == 20
    kept = {tr["group"] for tr in trajs}
    assert kept == set(range(header["groups_kept"]))  # the first groups, in order
    for g in kept:  # whole: every trajectory of a kept group is there
        assert sum(tr["group"] == g for tr in trajs) == 4
    assert header["steps_kept"] == sum(len(tr["steps"]) for tr in trajs) < header["steps_total"]


def test_long_texts_are_cut_in_the_middle() -> None:
    text = "START" + "x" * 5000 + "END"
    cut, was_cut = cut_text(text, 100)
    assert was_cut and cut.startswith("START") and cut.endswith("END") and len(cut) <= 100 + 30
    assert cut_text("short", 100) == ("short", False)


def test_eval_hook_records_returns_and_step_groups_without_advantages(tmp_path: Path) -> None:
    from gigpo.rollout.collect import Rollout

    steps, episodes, _ = synthetic_rollout(n_groups=3, group_size=1, length=5, seed=2)
    hook = make_recorder(tmp_path, rollouts_every=3).eval_hook(0)
    hook(Rollout(steps, episodes))
    header, trajs = read_lines(tmp_path / "records" / "000000-eval.jsonl.gz")
    assert header["phase"] == "eval" and header["group_size"] == 1
    for tr in trajs:
        rewards = [st["reward"] for st in tr["steps"]]
        want = np.zeros(len(rewards))  # R_t by the plain backward loop, gamma 0.95 (the recipe default)
        acc = 0.0
        for t in reversed(range(len(rewards))):
            acc = rewards[t] + 0.95 * acc
            want[t] = acc
        assert [st["return"] for st in tr["steps"]] == pytest.approx(want, abs=5e-7 * len(rewards))
        assert all(st["adv"] is None and st["adv_step"] is None for st in tr["steps"])


@pytest.mark.parametrize("estimator", ["grpo", "ppo"])
def test_parts_an_estimator_lacks_are_null_not_zero(tmp_path: Path, estimator: str) -> None:
    steps, episodes, result = synthetic_rollout(n_groups=2, group_size=3, length=4, estimator=estimator)
    recorder = make_recorder(tmp_path, estimator, rollouts_every=1)
    _, trajs = read_lines(recorder.after_advantage(1, True, result, episodes))
    by_key = {key: i for i, key in enumerate(zip(steps.traj.tolist(), steps.step.tolist()))}
    for tr in trajs:
        for st in tr["steps"]:
            i = by_key[(tr["traj"], st["t"])]
            assert st["adv_step"] is None and st["adv"] == pytest.approx(result.advantage[i], abs=5e-7 + 1e-14)
            if estimator == "grpo":
                assert st["adv_episode"] == pytest.approx(result.episode_advantage[i], abs=5e-7 + 1e-14)
            else:  # PPO: no episode part, but the critic's value of the state
                assert st["adv_episode"] is None and st["value"] == pytest.approx(result.value[i], abs=5e-7 + 1e-14)


def test_a_failing_record_never_stops_training(tmp_path: Path, capsys) -> None:
    steps, episodes, result = synthetic_rollout(n_groups=1, group_size=2, length=3)
    (tmp_path / "records").write_text("a file where the folder should be")  # the write fails
    assert make_recorder(tmp_path, rollouts_every=1).after_advantage(1, True, result, episodes) is None
    assert "the train rollout record of iteration 1 failed" in capsys.readouterr().out


def test_gigpo_advantage_scores_a_record_again_as_the_update_did(tmp_path: Path, capsys) -> None:
    """A run's records are the input users have without logging.log_rollouts: `gigpo advantage` reads one and,
    with the run's estimator, gives back the advantages the update used; another estimator sees the same anchors."""
    from gigpo.advantage import compute_advantages, read_advantages
    from gigpo.cli import main

    steps, episodes, result = synthetic_rollout(n_groups=3, group_size=4, length=6, seed=2)
    path = make_recorder(tmp_path, rollouts_every=1).after_advantage(1, True, result, episodes)
    _, trajs = read_lines(path)
    recorded = [st["adv"] for tr in trajs for st in tr["steps"]]
    out = tmp_path / "adv.jsonl"
    assert main(["advantage", "--input", str(path), "--output", str(out)]) == 0
    assert "train rollout record of iteration 1" in capsys.readouterr().err
    got = read_advantages(out)
    assert len(got["advantage"]) == len(recorded) == len(steps)
    np.testing.assert_allclose(got["advantage"], recorded, rtol=0, atol=5e-7 + 1e-12)  # the record's 6 decimals

    order = {key: i for i, key in enumerate(zip(steps.traj.tolist(), steps.step.tolist()))}
    in_record_order = [order[(tr["traj"], st["t"])] for tr in trajs for st in tr["steps"]]
    from gigpo.viewer.record_files import record_step_rows

    rows = record_step_rows(path)[1]  # the estimator's own keys come back, not keys of their hex text
    np.testing.assert_array_equal(rows.anchor, steps.anchor[in_record_order])
    options = dict(gamma=0.95, lam=0.95, step_weight=1.0, norm="std", episode_stats="trajectory", similarity=None)
    hgpo = compute_advantages("hgpo", steps, **options, hgpo_history=2, hgpo_alpha=1.0, hgpo_episode_group=False)
    assert main(["advantage", "--estimator", "hgpo", "--input", str(path), "--output", str(out)]) == 0
    np.testing.assert_allclose(read_advantages(out)["advantage"], hgpo.advantage[in_record_order], rtol=0, atol=1e-12)

    assert main(["advantage", "--input", str(path), "--output", str(out), "--similarity", "0.9"]) == 2
    assert "keeps anchor keys, not the anchor texts" in capsys.readouterr().err


@pytest.mark.parametrize("estimator, options", [
    ("hgpo", dict(hgpo_history=1, hgpo_alpha=0.5, hgpo_episode_group=True)),
    ("graphgpo", dict(graph_gamma=0.5, graph_distance="delta", graph_episode_weight=0.5, step_weight=2.0)),
    ("gigpo", dict(step_min_spread=0.3, norm="mean")),
    ("ppo", dict(lam=0.5)),
])
def test_a_record_keeps_every_option_its_estimator_used(tmp_path: Path, capsys, estimator: str, options: dict) -> None:
    """A run with a successor estimator's or GiGPO's less common options: `gigpo advantage` on its record, given
    no options, still returns the update's advantages (its header names them all, not only gamma and the norm)."""
    from gigpo.advantage import read_advantages
    from gigpo.advantage.cli import RECORDED_OPTIONS
    from gigpo.cli import main

    recorder = make_recorder(tmp_path, estimator, algorithm=options)
    assert recorder.header["split_versions"] is True  # rollout.group_versions=separate, the default
    trained_with = {name: recorder.header[name] for name in (*RECORDED_OPTIONS[1:], "similarity")}
    assert {name: trained_with[name] for name in options} == options
    steps, episodes, result = synthetic_rollout(n_groups=3, group_size=4, length=6, seed=3, estimator=estimator,
                                                **trained_with)
    assert result.advantage.std() > 0.1  # something to compare
    path = recorder.after_advantage(1, True, result, episodes)
    _, trajs = read_lines(path)
    recorded = [st["adv"] for tr in trajs for st in tr["steps"]]
    out = tmp_path / "adv.jsonl"
    assert main(["advantage", "--input", str(path), "--output", str(out)]) == 0
    note = capsys.readouterr().err
    assert all(f"{name}={value}" in note for name, value in options.items())  # says what it scored with
    # the record's 6 decimals; PPO's GAE also sums up to 1 / (1 - gamma * lam) of the record's rounded values
    atol = (5e-7 + 1e-12) * (1 + 2 / (1 - 0.95 * options["lam"]) if estimator == "ppo" else 1)
    np.testing.assert_allclose(read_advantages(out)["advantage"], recorded, rtol=0, atol=atol)
