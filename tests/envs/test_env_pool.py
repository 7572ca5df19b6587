"""The env pool: grouping, batched stepping, fault isolation (exception, hang, dead worker), clean shutdown."""
from __future__ import annotations

import multiprocessing
import os

import gymnasium as gym
import pytest

import gigpo.envs  # noqa: F401  (registers the built-in envs)
from gigpo.envs.pool import EnvPool
from envs.faulty_envs import CounterEnv

COUNTER_ID = "test/Counter-v0"
gigpo.envs.register_env(COUNTER_ID, CounterEnv)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_counts(seeds: list[int]) -> dict[int, int]:
    """What each seed's counter starts at, from the env itself (no pool)."""
    env = CounterEnv()
    return {seed: int(env.reset(seed=seed)[0].split("=")[1]) for seed in seeds}


def test_sokoban_groups_share_their_start_and_the_expert_solves_every_episode_through_the_pool():
    seeds = [11, 12, 13, 14]
    with EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=2) as pool:
        views = pool.reset(seeds, group_size=4)
        assert [v.group_idx for v in views] == [g for g in range(4) for _ in range(4)]
        for g in range(4):
            members = views[4 * g: 4 * g + 4]
            assert len({v.observation for v in members}) == 1
            assert len({v.anchor for v in members}) == 1
        assert len({v.observation for v in views}) > 1  # different seeds, different rooms
        # The direct env gives the same room for the same seed: the pool adds nothing to the state.
        direct = gym.make("gigpo/Sokoban-v0")
        assert direct.reset(seed=13)[0] == views[8].observation
        while pool.live_episodes():
            experts = pool.expert_actions()
            assert all(a in ("up", "down", "left", "right") for a in experts.values())
            pool.step({i: f"<think>plan</think><action>{a}</action>" for i, a in experts.items()})
        final = pool.episodes
        assert all(v.won and v.terminated and not v.truncated for v in final)
        assert all(v.step == v.history.__len__() <= 10 for v in final)
        assert pool.stats().steps == sum(v.step for v in final)
        assert pool.stats().env_errors == pool.stats().step_timeouts == 0


def test_time_limit_truncates_and_invalid_actions_cost_the_penalty():
    with EnvPool("gigpo/Sokoban-v0", max_steps=2, workers=1) as pool:
        pool.reset([0], group_size=2)
        first = pool.step({0: "no tags at all", 1: "<action>fly</action>"})
        assert [v.reward for v in first] == [-0.1, -0.1]
        assert not any(v.info["action_valid"] for v in first)
        assert "no <action>" in first[0].info["invalid_reason"] and "'fly'" in first[1].info["invalid_reason"]
        assert first[0].observation == first[0].history[0][0]  # an invalid action does not move anything
        second = pool.step({0: "<action>up</action>", 1: "<action>up</action>"})
        assert all(v.truncated and not v.terminated for v in second)
        assert pool.live_episodes() == []
        with pytest.raises(ValueError, match="episode 0 is done"):
            pool.step({0: "<action>up</action>"})


def test_a_raising_env_and_a_hanging_env_end_only_their_own_episodes():
    seeds = [1, 2, 3]
    start = _start_counts(seeds)
    pool = EnvPool(COUNTER_ID, workers=2, step_timeout_s=1.0)
    pids = pool.worker_pids()
    try:
        views = pool.reset(seeds, group_size=2)  # episodes 0..5; worker 0 holds 0, 2, 4
        assert [v.observation for v in views] == [f"count={start[s]}" for s in seeds for _ in range(2)]
        pool.step({i: "inc" for i in range(6)})
        # Episode 1 raises, episode 2 hangs past the timeout (its worker also runs 0 and 4).
        views = pool.step({0: "inc", 1: "boom", 2: "hang", 3: "inc", 4: "inc", 5: "inc"})
        by_idx = {v.episode_idx: v for v in views}
        assert "boom on purpose" in by_idx[1].error and by_idx[1].reward == 0.0 and by_idx[1].done
        assert "step_timeout_s=1.0" in by_idx[2].error and by_idx[2].reward == 0.0 and by_idx[2].done
        for idx in (0, 3, 4, 5):
            assert by_idx[idx].observation == f"count={start[seeds[idx // 2]] + 2}"
            assert by_idx[idx].reward == 1.0 and by_idx[idx].error is None and not by_idx[idx].done
        stats = pool.stats()
        assert (stats.env_errors, stats.step_timeouts, stats.worker_restarts) == (1, 1, 1)
        assert pool.live_episodes() == [0, 3, 4, 5]
        # The restarted worker rebuilt episodes 0 and 4 by replay: they keep counting from where they were.
        views = pool.step({i: "inc" for i in pool.live_episodes()})
        assert [v.observation for v in views] == [f"count={start[seeds[i // 2]] + 3}" for i in (0, 3, 4, 5)]
        assert not _alive(pids[0]) and _alive(pids[1])
    finally:
        pool.close()
    assert not any(_alive(pid) for pid in pids + pool.worker_pids())


def test_a_reset_that_hangs_ends_its_episodes_and_the_others_start_normally():
    start = _start_counts([8])[8]
    with EnvPool(COUNTER_ID, {"hang_on_reset_seed": 7}, workers=2, step_timeout_s=1.0) as pool:
        views = pool.reset([7, 8], group_size=2)  # episodes 0 and 1 (seed 7) hang, one in each worker
        assert [v.done for v in views] == [True, True, False, False]
        assert all("reset: exceeded step_timeout_s" in v.error for v in views[:2])
        assert [v.observation for v in views[2:]] == [f"count={start}"] * 2
        assert (pool.stats().step_timeouts, pool.stats().worker_restarts) == (2, 2)
        assert [v.observation for v in pool.step({2: "inc", 3: "inc"})] == [f"count={start + 1}"] * 2


def test_a_worker_that_dies_ends_one_episode_and_close_leaves_no_processes():
    # Children started before this test (an earlier test's vLLM engine in the same pytest worker) are not the pool's.
    children_before = set(multiprocessing.active_children())
    pool = EnvPool(COUNTER_ID, workers=2, step_timeout_s=30.0)
    pool.reset([5], group_size=4)
    views = pool.step({0: "inc", 1: "inc", 2: "die", 3: "inc"})
    assert "died" in views[2].error and views[2].done
    assert [v.done for v in views] == [False, False, True, False]
    assert views[0].observation == views[1].observation == views[3].observation
    assert pool.stats().env_errors == 1 and pool.stats().worker_restarts == 1
    pids = pool.worker_pids()
    pool.close()
    pool.close()  # idempotent
    assert not any(_alive(pid) for pid in pids)
    assert set(multiprocessing.active_children()) - children_before == set()


def test_an_unpicklable_info_ends_only_that_episode():
    with EnvPool(COUNTER_ID, workers=1) as pool:
        pool.reset([1], group_size=2)
        views = pool.step({0: "lambda", 1: "inc"})
        assert "cannot be pickled" in views[0].error and views[0].done
        assert views[1].error is None and views[1].reward == 1.0
        assert pool.stats().env_errors == 1 and pool.stats().worker_restarts == 0


def test_a_smaller_reset_drops_the_extra_envs_and_the_pool_goes_on():
    with EnvPool(COUNTER_ID, workers=2) as pool:
        assert len(pool.reset([1, 2], group_size=3)) == 6
        pool.step({i: "inc" for i in range(6)})
        views = pool.reset([2], group_size=1)
        assert [(v.episode_idx, v.step, v.history) for v in views] == [(0, 0, ())]
        assert views[0].observation == f"count={_start_counts([2])[2]}"
        assert pool.step({0: "inc"})[0].step == 1 and pool.live_episodes() == [0]


def test_bad_arguments_name_the_input():
    with pytest.raises(gym.error.Error, match="Sokobn"):
        EnvPool("gigpo/Sokobn-v0", workers=1)
    with EnvPool("gigpo/Sokoban-v0", {"size": 2}, workers=1) as pool:
        with pytest.raises(ValueError, match=r"cannot make 'gigpo/Sokoban-v0' with env_kwargs=\{'size': 2\}.*size=2"):
            pool.reset([0], group_size=1)
    with EnvPool(COUNTER_ID, workers=1) as pool:
        with pytest.raises(ValueError, match="group_size=0"):
            pool.reset([1], group_size=0)
        with pytest.raises(IndexError, match="episode 0 does not exist"):
            pool.step({0: "inc"})


def test_submitted_steps_come_back_as_they_end_and_a_dead_worker_ends_only_its_episode():
    """Async stepping: a slow step holds back only its own episode (and those queued on its worker);
    a worker that dies mid-step ends that one episode, and its other episode is rebuilt by replay."""
    import time

    with EnvPool(COUNTER_ID, env_kwargs={"hang_s": 2.0}, workers=2, step_timeout_s=30.0) as pool:
        start = pool.reset([5], group_size=4)[0].observation  # episodes 0 and 2 on worker 0, 1 and 3 on worker 1
        count = int(start.split("=")[1])
        t0 = time.monotonic()
        pool.submit_step(0, "hang")
        pool.submit_step(1, "inc")
        first = pool.poll()
        assert [v.episode_idx for v in first] == [1] and time.monotonic() - t0 < 1.5  # not behind the 2 s hang
        with pytest.raises(ValueError, match="already has a step in flight"):
            pool.submit_step(0, "inc")
        with pytest.raises(RuntimeError, match="still in flight"):
            pool.step({3: "inc"})
        pool.submit_step(2, "inc")  # queued behind the hang on worker 0
        pool.submit_step(3, "die")  # kills worker 1, where episode 1 lives too
        ended = {}
        while pool.steps_in_flight:
            ended.update({v.episode_idx: v for v in pool.poll(timeout=10.0)})
        assert sorted(ended) == [0, 2, 3]
        assert ended[0].observation == ended[2].observation == f"count={count + 1}"
        assert ended[3].done and "died" in ended[3].error
        assert pool.step({1: "inc"})[0].observation == f"count={count + 2}"  # episode 1 survived the restart
        assert pool.stats().worker_restarts == 1 and pool.poll(timeout=0) == []
