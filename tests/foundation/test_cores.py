"""The cores a process may use and each side-by-side process's share (gigpo/infra/cores.py), and that a rank's env
pool starts the number of workers that `gigpo plan` budgets memory for."""
from __future__ import annotations

import os

import pytest

from gigpo.infra.cores import share_of_cores, share_threads, usable_cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs an affinity mask of at least two cores to narrow")
def test_usable_cores_follow_the_affinity_mask_not_the_machine():
    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(everything)})  # what `taskset -c 0` or a one-core cpuset does
    try:
        assert os.cpu_count() >= 2
        assert usable_cores() == 1
        assert share_of_cores(1) == 1
    finally:
        os.sched_setaffinity(0, everything)
    assert usable_cores() == len(everything)


def test_each_process_gets_an_even_share_and_at_least_one_core():
    cores = usable_cores()
    assert share_of_cores(1) == cores
    assert share_of_cores(2) == max(1, cores // 2)
    assert share_of_cores(cores + 5) == 1
    with pytest.raises(ValueError, match="processes=0"):
        share_of_cores(0)


def test_a_thread_count_the_user_chose_is_kept():
    assert share_threads({"OMP_NUM_THREADS": "7"}, 2) == "7"
    child_env: dict[str, str] = {}
    assert share_threads(child_env, 2) == str(share_of_cores(2))
    assert child_env == {"OMP_NUM_THREADS": str(share_of_cores(2))}


def test_a_ranks_env_pool_starts_the_workers_the_plan_counts():
    """Two ranks on this machine each start their share of its cores in env workers: the pool used to start one per
    core on every rank while the memory plan counted the share."""
    from gigpo.config import load_config
    from gigpo.plan import plan_for
    from gigpo.trainer.setup import build_pool

    ranks = usable_cores()  # one core each: the smallest pools
    config = load_config("recipes/sokoban_tiny.yaml", [f"trainer.nprocs={ranks}"])
    planned = plan_for(config, on_gpu=False).env_workers
    assert planned == 1
    pool = build_pool(config)
    try:
        assert pool.num_workers == planned
    finally:
        pool.close()
    chosen = load_config("recipes/sokoban_tiny.yaml", [f"trainer.nprocs={ranks}", "env.workers=2"])
    assert plan_for(chosen, on_gpu=False).env_workers == 2
