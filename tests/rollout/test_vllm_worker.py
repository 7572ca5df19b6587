"""The code gigpo runs inside vLLM's worker process, apart from the engine."""
from __future__ import annotations

import logging

from gigpo.rollout.weight_sync.worker import RELOAD_LOGGER, install_reload_warning_filter


def test_reload_warning_is_dropped_for_rotary_tables_only(caplog):
    """Every weight sync logged "RotaryEmbedding: Failed to load weights" (its table is derived, never a
    weight); the filter must drop exactly that, and keep the same warning for a layer that lost a weight."""
    install_reload_warning_filter()
    install_reload_warning_filter()  # once per process, however often a sync runs
    logger = logging.getLogger(RELOAD_LOGGER)
    assert len([f for f in logger.filters if getattr(f, "__name__", "") == "drop_derived_layer_warnings"]) == 1
    with caplog.at_level(logging.WARNING, logger=RELOAD_LOGGER):
        logger.warning("%s: Failed to load weights", "RotaryEmbedding")
        logger.warning("%s: Failed to load weights", "QKVParallelLinear")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["QKVParallelLinear: Failed to load weights"]


ENGINE_OWNER = """
import sys, time
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.server_client import ServerGenerator
from gigpo.rollout.vllm_backend import VLLMGenerator
from gigpo.rollout.types import SamplingSettings
if __name__ == "__main__":
    import os
    settings = EngineSettings(dtype="fp32", max_num_seqs=4, enforce_eager=True, kv_cache_gb=1)
    # the server runs its engine inside its own process (no core and worker importing vLLM): what is checked for
    # it is that the server ends; the engine core and worker processes are this process's own engine's
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    server = ServerGenerator(sys.argv[1], settings, log_dir=sys.argv[2])
    del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
    for gen in (VLLMGenerator(sys.argv[1], settings), server):
        gen.generate([[5, 6, 7]], SamplingSettings(temperature=0.0, max_new_tokens=2))
    print("ready", flush=True)
    time.sleep(600)
"""


def test_a_killed_trainer_takes_its_vllm_engine_and_its_server_with_it(tmp_path, tiny_model_dir):
    """SIGKILL (the OOM killer's) runs no clean-up in the process that built the engine: vLLM's engine core and
    worker stayed behind with their memory, and so did a `gigpo serve` the trainer had started, with its own
    engine. The worker watches its owner and the server its trainer (gigpo/infra/owner_watch.py): all of them
    must end within seconds."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    script = tmp_path / "owner.py"
    script.write_text(ENGINE_OWNER)
    owner = subprocess.Popen([sys.executable, str(script), str(tiny_model_dir), str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    engine: list = []
    try:
        assert any(line.strip() == "ready" for line in owner.stdout), "the engine did not start"  # vLLM logs first
        engine = psutil.Process(owner.pid).children(recursive=True)
        names = [" ".join(p.cmdline()) for p in engine]
        assert sum("EngineCore" in n for n in names) == 1 and sum("Worker" in n for n in names) == 1, names
        assert sum("gigpo.cli serve" in n for n in names) == 1, names
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        gone, alive = psutil.wait_procs(engine, timeout=30)
        assert not alive, f"left running after their owner was killed: {[' '.join(p.cmdline()) for p in alive]}"
    finally:  # the engine processes of a failed run are no longer this process's children
        if owner.poll() is None:
            owner.kill()
        for p in engine:
            if p.is_running():
                p.kill()


def test_the_owner_watch_starts_only_for_a_readable_owner_other_than_this_process(monkeypatch):
    """An owner whose start could not be read (no /proc) must not read as gone: the engine would kill itself."""
    import os

    from gigpo.infra.owner_watch import (OWNER_ENV, SERVER_OWNER_ENV, name_this_process_the_owner, this_process,
                                         watch_owner, watch_server_owner)

    name_this_process_the_owner()
    assert watch_owner() is None                                   # the engine core in this very process
    monkeypatch.setenv(SERVER_OWNER_ENV, this_process())
    assert watch_server_owner() is None                            # nor does a server watch itself
    for env, watch in ((OWNER_ENV, watch_owner), (SERVER_OWNER_ENV, watch_server_owner)):
        monkeypatch.setenv(env, f"{os.getppid()}:None")
        assert watch() is None                                     # unreadable start: no watch
        monkeypatch.delenv(env)
        assert watch() is None                                     # no owner named (a server started by hand)


def test_the_owner_watch_survives_a_system_clock_set_and_still_sees_its_owner_end(monkeypatch):
    """The wall clock is set while engines run (a virtual machine resumed from a snapshot, NTP): a CI run's
    server lost its engine mid-module when the owner's wall-clock start, which moves with the clock, stopped
    matching the one it was named by. Here the boot time psutil reads moves an hour (the one fault injected:
    setting this machine's clock would disturb every other test). The watch must not fire; once the owner is
    killed it must, within seconds. A name whose start does not match (a reused pid) reads as gone."""
    import subprocess
    import sys
    import threading
    import time

    import psutil

    from gigpo.infra import owner_watch

    owner = subprocess.Popen([sys.executable, "-c", "import time\nfrom gigpo.infra.owner_watch import this_process\n"
                              "print(this_process(), flush=True)\ntime.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        monkeypatch.setenv(owner_watch.SERVER_OWNER_ENV, owner.stdout.readline().strip())
        named = owner_watch._owner(owner_watch.SERVER_OWNER_ENV)
        assert named is not None and named[0] == owner.pid
        boot_time = psutil._psplatform.boot_time
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: boot_time() + 3600.0)
        gone, reused = threading.Event(), threading.Event()
        owner_watch._watch(named, gone.set, poll_s=0.05)
        owner_watch._watch((named[0], named[1] - 10.0), reused.set, poll_s=0.05)
        assert reused.wait(timeout=5)                # the same pid, started at another time: another process
        time.sleep(0.5)                              # ten looks
        assert not gone.is_set(), "the watch took a set clock for its owner's end"
        owner.kill()
        owner.wait()
        assert gone.wait(timeout=5)
    finally:
        if owner.poll() is None:
            owner.kill()
