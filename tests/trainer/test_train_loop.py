"""`gigpo train` end to end on Sokoban with a tiny local model: real DeepSpeed, real generation.

Runs are shrunk through overrides (2 groups x 2 episodes, 3 steps) so that each costs seconds; what
is checked is the product's contract: the run directory, metrics keys, checkpoints that load, resume.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from support.run import (REPO, REQUIRED_KEYS, WARM, allreduce_buffers_left, assert_generator_holds_the_trainers_weights,
                         assert_same_update, assert_same_weights, cut_back, train, train_and_kill_in_iteration_3)
from support.tolerance import logprob_tolerance
from transformers import AutoConfig

from gigpo.config import load_config

def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_loadable_checkpoint(run_dir: Path, iteration: int) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = run_dir / "checkpoints" / str(iteration)
    assert (ckpt / "meta.json").is_file() and (ckpt / "ds" / "actor").is_dir()
    model = AutoModelForCausalLM.from_pretrained(ckpt / "hf")
    AutoTokenizer.from_pretrained(ckpt / "hf")
    assert model.config.model_type == "qwen2"


def assert_rollout_records(run: Path, record: dict, group_size: int) -> None:
    """The rows the trainer dumped (logging.log_rollouts) for `record`'s iteration: every trajectory in one
    group, `group_size` per group, steps 0..L-1 in order, rewards summing to the logged mean return, and
    the anchor of a group's first steps is one state: the reset state BEFORE any action (keyed after the
    action, trajectories whose first moves differ would disagree)."""
    rows = [json.loads(line) for line in (run / "rollouts" / f"{record['iteration']:06d}.jsonl").read_text().splitlines()]
    trajectories: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        trajectories[row["traj"]].append(row)
    groups: dict[int, list[list[dict]]] = defaultdict(list)
    for steps in trajectories.values():
        assert len({r["group"] for r in steps}) == 1, "a trajectory spans groups"
        assert [r["step"] for r in steps] == list(range(len(steps)))
        groups[steps[0]["group"]].append(steps)
    assert all(len(members) == group_size for members in groups.values())
    returns = [sum(r["reward"] for r in steps) for steps in trajectories.values()]
    assert sum(returns) / len(returns) == pytest.approx(record["rollout/return"])
    for members in groups.values():
        assert len({steps[0]["anchor"] for steps in members}) == 1
        assert all("P" in steps[0]["anchor"] for steps in members)  # a Sokoban room with its player


@pytest.mark.parametrize("estimator", ["gigpo", "grpo", "rloo", "ppo"])
def test_two_iterations_with_hf_generation(tmp_path: Path, estimator: str) -> None:
    run = tmp_path / estimator
    # gigpo's run also covers the reference model (KL), wandb's default offline mode and the rollout dump
    extra = ["algorithm.kl_coef=0.01", "logging.wandb_mode=offline", "logging.log_rollouts=true"] \
        if estimator == "gigpo" else []
    # warm-started, the policy acts: with 4 episodes per group of up to 4 steps, returns differ within
    # groups, so every estimator has a signal to train on
    train(run, f"algorithm.estimator={estimator}", "trainer.iterations=2", "trainer.save_every=2", *WARM,
          "env.group_size=4", *extra)
    records = metrics(run)
    assert [r["iteration"] for r in records] == [0, 1, 2]
    missing = REQUIRED_KEYS - set(records[-1]) - ({"loss/kl"} if extra else set())
    if extra:  # a KL coefficient brings the reference model and its metric
        assert "loss/kl" in records[-1]
    assert not missing, f"metrics lack {sorted(missing)}"
    assert records[2]["rollout/env_steps_total"] == records[1]["rollout/env_steps"] + records[2]["rollout/env_steps"]
    # an iteration whose episodes all end alike has no signal (advantages ~1e-11 from rounding); the seeded
    # run has one with a signal at least, and its advantages reach the gradient
    signal = [r for r in records[1:] if r["adv/advantage_std"] > 0.1]
    assert signal and all(r["actor/grad_norm"] > 1e-3 and r["adv/zero_advantage_share"] < 1.0 for r in signal)
    for record in records[1:]:
        assert record["rollout/invalid_action_rate"] < 0.5  # the warm-up taught the action format
        if estimator == "gigpo":  # a group's episodes share their first state at least: step groups merge rows
            assert record["adv/step_groups"] < record["adv/rows"] and record["adv/step_group_multi_row_share"] > 0
            assert_rollout_records(run, record, group_size=4)
        else:  # one step group per row outside GiGPO
            assert record["adv/step_groups"] == record["adv/rows"]
    if estimator == "ppo":
        assert "critic/grad_norm" in records[-1]
    assert_loadable_checkpoint(run, 2)
    assert (run / "config.yaml").is_file() and (run / "curves.png").stat().st_size > 0
    assert json.loads((run / "done.json").read_text())["iterations"] == 2
    if estimator == "gigpo":
        assert list((run / "wandb").glob("offline-run-*")), "wandb offline run directory missing"


def test_two_ranks_zero2_with_vllm_budget_stop_and_resume(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = tmp_path / "vllm2"
    # at most 12 env steps per iteration here, so a budget of 13 stops both ranks after iteration 2 of 3
    # (rank 1 never counted env steps before the budget was broadcast, and would have waited forever).
    # The untrained policy never acts (zero advantages); an entropy bonus moves its weights each iteration,
    # so iteration 2 depends on the weights and Adam moments restored on both ranks (ZeRO-2 splits the moments).
    # Eager engines: vLLM-CPU compiles its graphs at every engine start (four starts here: two runs of two ranks),
    # and nothing asserted depends on it; the compiled path is the default and runs in single-rank tests
    common = ["rollout.backend=vllm", "rollout.enforce_eager=true", "rollout.verify_sync=true", "trainer.nprocs=2",
              "trainer.zero_stage=2",
              "trainer.iterations=3", "trainer.max_env_steps=13", "trainer.save_every=1", "model.dtype=fp32",
              "algorithm.entropy_coef=0.01"]
    proc = train(run, *common)
    records = metrics(run)
    assert [r["iteration"] for r in records] == [0, 1, 2]
    assert_loadable_checkpoint(run, 2)
    meta = json.loads((run / "checkpoints" / "2" / "meta.json").read_text())
    assert meta["world_size"] == 2
    # DeepSpeed's CPU all-reduce buffers (64 MiB per rank in RAM-backed /dev/shm) are removed at shutdown
    assert allreduce_buffers_left(proc.stdout + proc.stderr) == set()

    # resumed from checkpoint 1 on two ranks, iteration 2 repeats the uninterrupted run's, budget stop included
    resumed = cut_back(run, tmp_path / "resumed", 1)
    train(resumed, *common, resume=True)
    got, want = metrics(resumed), records
    assert [r["iteration"] for r in got] == [0, 1, 2] and not (resumed / "checkpoints" / "3").exists()
    assert got[2]["rollout/env_steps_total"] == want[2]["rollout/env_steps_total"] == 24
    assert got[2]["rollout/tokens_generated"] == want[2]["rollout/tokens_generated"]
    assert want[2]["actor/grad_norm"] > 1e-3 and want[2]["loss/kl"] > 0  # the policy moved in iteration 1
    # vLLM sampled iteration 2 from checkpoint 1's weights, not from the model it was started with
    assert_generator_holds_the_trainers_weights(got[2], tiny_model_dir)
    assert_same_update(got[2], want[2], ("loss/kl", "loss/entropy", "actor/grad_norm"))
    assert_same_weights(resumed, run, 2, resumed_from=1)


def test_sigkill_in_iteration_3_then_resume_continues_exactly(tmp_path: Path) -> None:
    # a warm-started policy acts, so iterations 3 and 4 update with non-zero advantages: their losses, KL and
    # the final weights depend on the restored weights, Adam moments and RNG, not only on the seeds.
    # Dynamic sampling's re-draws must replay too: with the weak test warm-up, iteration 3 keeps a group only
    # after its 4th draw (issue 27's sampling seeds)
    common = [*WARM, "trainer.iterations=4", "trainer.save_every=1", "trainer.keep_last=5",
              "algorithm.dynamic_sampling=true", "algorithm.max_resample=4"]
    reference = tmp_path / "reference"
    train(reference, *common)

    run = tmp_path / "killed"
    train_and_kill_in_iteration_3(run, *common)

    train(run, *common, resume=True)
    records = metrics(run)
    assert [r["iteration"] for r in records] == [0, 1, 2, 3, 4]  # 1-2 neither repeated nor lost
    expected = metrics(reference)
    assert expected[3]["rollout/draws"] > 1  # iteration 3 re-drew
    for got, want in zip(records[3:], expected[3:]):  # same seeds and weights: the same episodes and update
        assert got["rollout/return"] == pytest.approx(want["rollout/return"])
        assert want["rollout/kept_groups"] > 0  # the warm-started policy gives groups with differing returns
        for key in ("rollout/tokens_generated", "rollout/draws", "rollout/kept_groups", "rollout/trained_steps",
                    "rollout/env_steps", "rollout/env_steps_total"):
            assert got[key] == want[key], key
        assert want["adv/zero_advantage_share"] < 1.0 and want["actor/grad_norm"] > 1e-3  # a real update
        assert want["loss/kl"] > 0  # the policy has moved away from the warm-up's
        assert_same_update(got, want, ("loss/policy", "loss/kl", "loss/entropy", "loss/clip_frac",
                                       "actor/grad_norm", "adv/advantage_std"))
    assert_same_weights(run, reference, 4, resumed_from=2)

    # --resume checks the command's settings against the run's config.yaml (gigpo/trainer/resume_config.py):
    # another seed stops it before anything loads; more iterations continue from checkpoint 4 and keep the
    # settings that trained iterations 1-4 beside the new config.yaml
    refused = train(run, *common, "trainer.iterations=5", "trainer.seed=12345", resume=True, check=False)
    assert refused.returncode == 2 and "trainer.seed: " in refused.stderr, refused.stderr[-3000:]
    assert [r["iteration"] for r in metrics(run)] == [0, 1, 2, 3, 4]
    extended = train(run, *common, "trainer.iterations=5", resume=True)
    assert "trainer.iterations: 4 -> 5" in extended.stdout, extended.stdout[-3000:]
    assert load_config(run / "config.to-iteration-4.yaml").trainer.iterations == 4
    assert load_config(run / "config.yaml").trainer.iterations == 5
    assert [r["iteration"] for r in metrics(run)] == [0, 1, 2, 3, 4, 5]


def test_dynamic_sampling_redraws_then_skips_an_update_without_signal(tmp_path: Path) -> None:
    # an untrained model never writes a parsable action, so every episode of a group has the same
    # return: each iteration draws 1 + max_resample times, keeps no group and must skip the update
    run = tmp_path / "dynamic"
    proc = train(run, "algorithm.dynamic_sampling=true", "algorithm.max_resample=2", "trainer.iterations=2",
                 "trainer.save_every=1")
    records = metrics(run)
    assert [r["iteration"] for r in records] == [0, 1, 2]
    played = 3 * 2 * 2 * 3  # draws x groups x episodes x steps (no episode can end early)
    for i, record in enumerate(records[1:], start=1):
        assert record["rollout/draws"] == 3 and record["rollout/kept_groups"] == 0
        assert record["rollout/trained_steps"] == 0
        assert record["rollout/env_steps"] == played  # re-drawn episodes count toward the budget
        assert record["rollout/env_steps_total"] == i * played
        assert "actor/grad_norm" not in record  # no update ran
    assert proc.stdout.count("skipping the update") == 2
    assert_loadable_checkpoint(run, 2)


def test_nan_reward_stops_the_run_without_a_checkpoint(tmp_path: Path) -> None:
    """The untrained policy's invalid answers earn a NaN penalty already in the baseline evaluation, whose
    rows are checked like the training rollout's: the run stops there (before, it logged NaN eval metrics
    and stopped at iteration 1's rollout).

    The run is in bf16, the config's default dtype, so that it also checks what a bf16 run says at its start:
    on a CPU without native bf16 kernels the trainer and the hf backend run bf16 matmuls in fp32 kernels, and
    the run says so (the stop is reached only after the set-up in bf16)."""
    from gigpo.infra.dtypes import cpu_has_fast_bf16

    run = tmp_path / "nan"
    proc = train(run, "model.dtype=bf16", "env.id=gigpo/TwentyFour-v0", "env.kwargs={}", "env.invalid_action_penalty=.nan",
                 "trainer.iterations=1", check=False)
    assert proc.returncode == 3 and "gigpo: training stopped: " in proc.stderr, proc.stderr[-3000:]
    assert "iteration 0, phase eval" in proc.stderr and "non-finite" in proc.stderr
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())
    warned = "gigpo: model.dtype=bf16 on a CPU without native bf16 kernels" in proc.stdout
    assert warned == (not cpu_has_fast_bf16()), proc.stdout[-3000:]


def test_nan_inside_the_update_stops_the_run_with_exit_code_3(tmp_path: Path) -> None:
    """An infinite entropy bonus makes the loss -inf inside ActorEngine.update(): the engine's guard raises,
    and `gigpo train` ends as for any NaN (message, exit code 3, no checkpoint), not with a traceback."""
    run = tmp_path / "nan_update"
    proc = train(run, "algorithm.entropy_coef=.inf", "trainer.iterations=1", "trainer.save_every=1", check=False)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "gigpo: training stopped: " in proc.stderr and "loss is NaN/inf" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())


def test_budget_too_small_for_one_sample_fails_before_rollout(tmp_path: Path) -> None:
    run = tmp_path / "budget"
    proc = train(run, "trainer.micro_token_budget=64", check=False)
    assert proc.returncode == 2
    assert "rollout.max_prompt_tokens=128 + rollout.max_new_tokens=8 = 136" in proc.stderr
    assert "trainer.micro_token_budget=64" in proc.stderr
    assert not run.exists()  # nothing was started or written


def test_generator_old_logprobs_give_the_trainers_losses_and_gradients(tmp_path: Path, tiny_model_dir: Path) -> None:
    """trainer.old_logprobs=generator skips the actor's old-log-prob pass; with the hf backend in fp32 at
    temperature 1 the update must not change. PPO's critic makes advantages non-zero even when a random
    policy's returns are all equal."""
    records = {}
    for source in ("generator", "trainer"):
        run = tmp_path / source
        train(run, "algorithm.estimator=ppo", "algorithm.kl_coef=0.01", "trainer.iterations=1",
              f"trainer.old_logprobs={source}", "model.dtype=fp32")
        records[source] = metrics(run)[-1]
    fast, plain = records["generator"], records["trainer"]
    assert fast["rollout/env_steps"] == plain["rollout/env_steps"]  # the same seeded rollout
    # the same fp32 weights through the generator's and the trainer's kernels: at most the reorder bound of
    # a forward over the longest sequence a step can hold (support.tolerance)
    longest = load_config(REPO / "recipes" / "sokoban_tiny.yaml", []).rollout.max_prompt_tokens + 8
    bound = logprob_tolerance(AutoConfig.from_pretrained(tiny_model_dir), longest)
    # logged either way (from 32 recomputed samples when the generator's log-probs are used)
    assert plain["rollout/logp_gap_max"] < bound and fast["rollout/logp_gap_max"] < bound
    assert abs(plain["loss/policy"]) > 1e-6  # a real signal, not a trivially equal zero
    # a log-prob gap g moves the ratio exp(logp - logp_old), and the losses with it, by about g relative
    assert bound < 1e-3
    for key in ("loss/policy", "loss/kl", "loss/entropy", "actor/grad_norm", "critic/value_loss"):
        assert fast[key] == pytest.approx(plain[key], rel=1e-3, abs=1e-6), key


def test_old_logprobs_auto_uses_the_generator_only_where_exact() -> None:
    from gigpo.config import load_config
    from gigpo.trainer.rollout_correction import old_logprobs_from_generator

    recipe = REPO / "recipes" / "sokoban_tiny.yaml"
    assert old_logprobs_from_generator(load_config(recipe, []))  # hf, fp32, temperature 1
    for override in ("rollout.backend=vllm", "model.dtype=bf16", "trainer.old_logprobs=trainer"):
        assert not old_logprobs_from_generator(load_config(recipe, [override])), override
    with pytest.raises(Exception, match="old_logprobs=generator needs rollout.temperature=1"):
        load_config(recipe, ["trainer.old_logprobs=generator", "rollout.temperature=0.7"])


def resume_from_checkpoint_2(tmp_path: Path, *overrides: str) -> tuple[dict, dict, Path, Path]:
    """Train 3 iterations straight; copy that run, cut it back to its checkpoint 2 (as a kill in iteration 3
    leaves it) and `--resume` it. Returns iteration 3's records and both run dirs."""
    common = [*WARM, "trainer.iterations=3", "trainer.save_every=1", "trainer.keep_last=5", *overrides]
    reference = tmp_path / "reference"
    proc = train(reference, *common, resume=True)  # --resume on an empty run dir starts from the beginning
    assert "--resume found no checkpoint" in proc.stdout and "starting from the beginning" in proc.stdout
    run = cut_back(reference, tmp_path / "resumed", 2)
    train(run, *common, resume=True)
    got, want = metrics(run), metrics(reference)
    assert [r["iteration"] for r in got] == [0, 1, 2, 3]
    return got[3], want[3], run, reference


def test_ppo_resume_restores_the_critic(tmp_path: Path) -> None:
    got, want, run, reference = resume_from_checkpoint_2(tmp_path, "algorithm.estimator=ppo")
    # the critic's values set the advantages, and its own update depends on its restored weights and moments
    assert want["critic/grad_norm"] > 1e-3
    assert_same_update(got, want, ("adv/advantage_std", "critic/value_loss", "critic/grad_norm", "loss/policy",
                                   "actor/grad_norm", "loss/entropy"))
    assert_same_weights(run, reference, 3, resumed_from=2)
