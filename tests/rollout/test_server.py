"""vllm-server: real `gigpo serve` processes started and supervised by the client."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests
import torch

from gigpo.infra.ports import free_port
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.server import check_exposure
from gigpo.rollout.server_client import ServerError, ServerGenerator
from gigpo.rollout.types import SamplingSettings
from gigpo.rollout.weight_sync.verify import SyncVerifier
from gigpo.rollout.weight_sync.tensors import full_state_dict, ties_lm_head, write_weights_file

from support.greedy import assert_greedy_matches, tokens
from support.models import load_trainer_model, perturb
from support.run import (assert_generator_holds_the_trainers_weights, assert_same_update, assert_same_weights,
                         cut_back, metrics_of, train)

from .conftest import GREEDY, assert_submitted_like_a_batch, sample_prompts, submit_and_wait

TOKEN = "test-token"
QUICK = 3.0
"""unresponsive_s for the clients of the fault tests below: a stopped server is seen ~3-8 s after its last answer,
not the default's 8-13 s (which `test_a_run_in_async_mode_names_a_server_that_stops_answering_within_30_s` keeps
checking). Set only once the server is stopped, so a slow /health before the fault cannot fail a test."""


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    gen = ServerGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", max_num_seqs=32, enforce_eager=True),
                          num_servers=1, token=TOKEN, log_dir=str(tmp_path_factory.mktemp("serve")))
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def trainer(tiny_model_dir):
    return load_trainer_model(tiny_model_dir), HFGenerator(str(tiny_model_dir), dtype="fp32")


def _sync_both(served, trainer, seed):
    model, hf = trainer
    perturb(model, seed=seed)
    version = served.version + 1
    hf.update_weights(model.named_parameters(), version)
    return version


def test_server_sync_makes_greedy_equal_to_hf(served, trainer):
    prompts = sample_prompts(6, seed=9)
    version = _sync_both(served, trainer, seed=300)
    expected = [c.token_ids for c in trainer[1].generate(prompts, GREEDY)]
    assert [c.token_ids for c in served.generate(prompts, GREEDY)] != expected
    served.update_weights(trainer[0].named_parameters(), version)
    synced = served.generate(prompts, GREEDY)
    assert_greedy_matches(trainer[1].model, prompts, tokens(synced), expected)
    assert {c.weight_version for c in synced} == {version}
    assert requests.get(f"{served.servers[0].url}/version", timeout=5).json() == {"version": version}
    assert SyncVerifier(served, trainer[0].config.vocab_size, atol=2e-3).check(trainer[0]) < 2e-3


def test_concurrent_one_prompt_requests_are_batched_by_the_server_and_sample_like_a_batch(served):
    """An async rollout posts one prompt per request, many at once; the server batches them continuously
    and, each request seeded on its own, they draw what one batched request draws."""
    assert_submitted_like_a_batch(served, sample_prompts(10, seed=12),
                                  SamplingSettings(temperature=1.0, max_new_tokens=10, seed=21))


def test_weight_update_needs_the_token(served):
    resp = requests.post(f"{served.servers[0].url}/update_weights", json={"path": "/dev/shm/x", "version": 99},
                         timeout=5)
    assert resp.status_code == 401
    with pytest.raises(ValueError, match="beyond loopback"):
        check_exposure("0.0.0.0", token=None)
    check_exposure("127.0.0.1", token=None)


@pytest.mark.parametrize("route", ["update_weights", "weight_transfer/init", "weight_transfer/commit"])
def test_weight_routes_refuse_a_missing_or_wrong_token(served, route):
    url = served.servers[0].url
    before = requests.get(f"{url}/version", timeout=5).json()
    body = {"path": "/dev/shm/x", "version": 99, "info": {}}
    for header in (None, "Bearer wrong-token", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN):
        headers = {"Authorization": header} if header else {}
        resp = requests.post(f"{url}/{route}", json=body, headers=headers, timeout=5)
        assert resp.status_code == 401, (route, header, resp.status_code)
        assert "Bearer <token>" in resp.json()["detail"]
    assert requests.get(f"{url}/version", timeout=5).json() == before  # nothing was loaded


def test_the_right_token_passes_the_check_and_reaches_the_route(served):
    url, auth = served.servers[0].url, {"Authorization": f"Bearer {TOKEN}"}
    resp = requests.post(f"{url}/weight_transfer/commit", json={"info": {}}, headers=auth, timeout=5)
    assert resp.status_code == 400 and "needs a version" in resp.json()["detail"]  # past authorization
    resp = requests.post(f"{url}/weight_transfer/bogus", json={"info": {}}, headers=auth, timeout=5)
    assert resp.status_code == 404 and "unknown weight transfer step" in resp.json()["detail"]


def test_server_and_client_take_the_token_from_the_environment(served, tiny_model_dir, monkeypatch):
    """The supervised server got TOKEN only through GIGPO_SERVER_TOKEN (no --token on its command line) and
    enforces it (the tests above); a client built without a token reads the same variable."""
    import psutil

    assert "--token" not in psutil.Process(served.servers[0].process.pid).cmdline()
    for value, refused in ((TOKEN, False), ("wrong-token", True)):
        monkeypatch.setenv("GIGPO_SERVER_TOKEN", value)
        external = ServerGenerator(str(tiny_model_dir), urls=[served.servers[0].url])
        try:
            assert external.token == value
            expected = "weight updates need" if refused else "needs a version"  # 401 or, authorized, 400
            with pytest.raises(ServerError, match=expected):
                external._post(external.servers[0], "weight_transfer/commit", {"info": {}})
        finally:
            external.close()


def test_serve_beyond_loopback_refuses_to_start_without_a_token():
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GIGPO_SERVER_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "gigpo.cli", "serve", "--model", "unused", "--host", "0.0.0.0"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "--host 0.0.0.0 listens beyond loopback: set --token (or GIGPO_SERVER_TOKEN)" in proc.stderr


def test_killed_server_is_restarted_at_the_current_version(served, trainer):
    prompts = sample_prompts(32, seed=10)
    version = _sync_both(served, trainer, seed=400)
    served.update_weights(trainer[0].named_parameters(), version)
    expected = [c.token_ids for c in trainer[1].generate(prompts, GREEDY)]
    first = served.servers[0].process

    killer = threading.Timer(0.2, lambda: os.killpg(first.pid, signal.SIGKILL))
    killer.start()
    during = served.generate(prompts, SamplingSettings(temperature=0, max_new_tokens=16))
    killer.join()
    after = served.generate(prompts, GREEDY)
    assert first.poll() is not None and served.servers[0].process is not first
    for result in (during, after):
        assert_greedy_matches(trainer[1].model, prompts, tokens(result), expected)
        assert {c.weight_version for c in result} == {version}


def test_server_that_stops_answering_mid_async_rollout_is_seen_within_30_s_and_replaced(served, trainer):
    """Async turns post one request per prompt. A supervised server stopped (SIGSTOP) under them is killed
    within 30 s of going silent, restarted at the current weights, and the requests come back right. Before,
    only the request timeout (60 s here, 300 s by default) noticed it."""
    prompts = sample_prompts(8, seed=14)
    version = _sync_both(served, trainer, seed=600)
    served.update_weights(trainer[0].named_parameters(), version)
    expected = [c.token_ids for c in trainer[1].generate(prompts, GREEDY)]
    first = served.servers[0].process
    seen: dict[str, float] = {}

    def time_of_death() -> None:
        while first.poll() is None:
            time.sleep(0.2)
        seen["dead"] = time.monotonic()
        served.unresponsive_s = unresponsive  # the replacement, starting under load, gets the default's patience

    timeout, unresponsive = served.request_timeout_s, served.unresponsive_s
    served.request_timeout_s, served.unresponsive_s = 60.0, QUICK
    os.killpg(first.pid, signal.SIGSTOP)
    seen["stopped"] = time.monotonic()
    watcher = threading.Thread(target=time_of_death, daemon=True)
    watcher.start()
    try:
        got = submit_and_wait(served, prompts, GREEDY, timeout_s=400)
    finally:
        served.request_timeout_s, served.unresponsive_s = timeout, unresponsive
    watcher.join(timeout=5)
    assert seen["dead"] - seen["stopped"] < 30
    assert served.servers[0].process is not first and served.servers[0].process.poll() is None
    assert_greedy_matches(trainer[1].model, prompts, tokens(got), expected)
    assert {c.weight_version for c in got} == {version}


def test_external_server_syncs_by_broadcast_with_the_token(served, trainer, tiny_model_dir):
    """The path to a server on another machine: no shared /dev/shm, so the client opens a broadcast
    group (gloo here, NCCL on GPUs) that the server joins through its token-guarded /weight_transfer."""
    external = ServerGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", weight_sync="nccl"),
                               urls=[served.servers[0].url], token=TOKEN)
    external._version = served.version
    prompts = sample_prompts(6, seed=11)
    try:
        for seed in (500, 501):  # the second sync reuses the group
            version = _sync_both(external, trainer, seed)
            expected = [c.token_ids for c in trainer[1].generate(prompts, GREEDY)]
            external.update_weights(trainer[0].named_parameters(), version)
            assert [c.token_ids for c in external.generate(prompts, GREEDY)] == expected
        assert requests.post(f"{served.servers[0].url}/weight_transfer/commit", json={"version": version + 1},
                             timeout=5).status_code == 401
    finally:
        external.close()
    served._version = version  # the supervised client's view of the server, for the tests after this one


def test_broadcast_sync_to_an_external_server_that_stops_answering_fails_within_30_s(served, trainer, tiny_model_dir):
    """weight_sync=nccl: a server stopped (SIGSTOP) between two broadcast syncs is named within 30 s, not when the
    group's 300 s timeout runs out; the sync given up on never commits its version when the server wakes."""
    url = served.servers[0].url
    external = ServerGenerator(str(tiny_model_dir), EngineSettings(dtype="fp32", weight_sync="nccl"),
                               urls=[url], token=TOKEN, request_timeout_s=60)
    external._version = served.version
    pid = served.servers[0].process.pid
    try:
        synced = _sync_both(external, trainer, 510)
        external.update_weights(trainer[0].named_parameters(), synced)  # opens the group
        os.killpg(pid, signal.SIGSTOP)
        external.unresponsive_s = QUICK
        start = time.monotonic()
        with pytest.raises(ServerError, match=f"{url} failed to take weights version {synced + 1} by broadcast: "
                                              f"{url} stopped answering: /health unanswered .* restart it"):
            external.update_weights(trainer[0].named_parameters(), synced + 1)
        took = time.monotonic() - start
        assert url not in external._nccl_senders  # the cut group is not reused
    finally:
        os.killpg(pid, signal.SIGCONT)
        external.close()
    assert took < 30
    time.sleep(5)  # the abandoned sync's receive completes once the server runs again; it must not commit
    assert requests.get(f"{url}/version", timeout=30).json() == {"version": synced}
    served._version = synced


def test_external_server_that_stops_answering_fails_clearly(served, tiny_model_dir):
    """A stopped (SIGSTOP) external server is detected within 30 s and named; it is not restarted."""
    external = ServerGenerator(str(tiny_model_dir), urls=[served.servers[0].url], token=TOKEN)
    external._version = served.version
    pid = served.servers[0].process.pid
    os.killpg(pid, signal.SIGSTOP)
    external.unresponsive_s = QUICK
    start = time.monotonic()
    try:
        with pytest.raises(ServerError, match=f"{served.servers[0].url} failed: .*unanswered.*external"):
            external.generate(sample_prompts(2), GREEDY)
    finally:
        os.killpg(pid, signal.SIGCONT)
        external.close()
    assert time.monotonic() - start < 30


def test_external_server_that_stops_answering_mid_async_rollout_fails_its_requests_within_30_s(served, tiny_model_dir):
    """An async rollout's one-prompt requests to a stopped external server fail within 30 s with an error that
    names it and what to do; before, each waited out request_timeout_s (60 s here, 300 s by default)."""
    url = served.servers[0].url
    external = ServerGenerator(str(tiny_model_dir), urls=[url], token=TOKEN, request_timeout_s=60)
    external._version = served.version
    pid = served.servers[0].process.pid
    prompts = sample_prompts(4, seed=13)
    try:
        assert len(submit_and_wait(external, prompts, GREEDY)) == len(prompts)  # the rollout's first turn
        os.killpg(pid, signal.SIGSTOP)
        external.unresponsive_s = QUICK
        start = time.monotonic()
        with pytest.raises(ServerError, match=f"{url} stopped answering: /health unanswered .* restart it and resume"):
            submit_and_wait(external, prompts, GREEDY, timeout_s=90)
        took = time.monotonic() - start
    finally:
        os.killpg(pid, signal.SIGCONT)
        external.close()
    assert took < 30


def test_weight_sync_to_a_stopped_external_server_fails_within_30_s(served, trainer, tiny_model_dir):
    """A weight sync to a stopped external server fails within 30 s, naming it; the server, continued, keeps its
    weights (the sync's file is gone by then)."""
    url = served.servers[0].url
    external = ServerGenerator(str(tiny_model_dir), urls=[url], token=TOKEN, request_timeout_s=60)
    external._version = before = served.version
    pid = served.servers[0].process.pid
    os.killpg(pid, signal.SIGSTOP)
    external.unresponsive_s = QUICK
    start = time.monotonic()
    try:
        with pytest.raises(ServerError, match=f"{url} failed to take weights version {before + 1}: {url} stopped "
                                              "answering: /health unanswered .* remove it from rollout.server_urls"):
            external.update_weights(trainer[0].named_parameters(), before + 1)
        took = time.monotonic() - start
    finally:
        external.close()  # removes the weights file before the server reads the queued request
        os.killpg(pid, signal.SIGCONT)
    assert took < 30
    assert requests.get(f"{url}/version", timeout=30).json() == {"version": before}


def test_unreachable_external_server_is_named():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"{url} does not answer /health"):
        ServerGenerator("unused", urls=[url], unresponsive_s=1.0)  # the default waits 8 s for a port nobody holds


def test_a_weight_update_waits_for_the_requests_of_a_client_that_gave_up(served, trainer):
    """A client that gave up on this server (its rollout failed, or it was killed) leaves requests running there.
    The next trainer's weight update must wait for them and land (it answered a bare 500 before, the trainer's
    run then failing), and those requests must finish on the weights they started with."""
    url = served.servers[0].url
    before = served.version
    body = {"prompts": sample_prompts(32, seed=16),
            "settings": SamplingSettings(temperature=1.0, max_new_tokens=400, seed=3).to_json()}
    for _ in range(3):  # under load, all 32 can end between two polls: the case did not happen; again
        answered: dict = {}
        abandoned = threading.Thread(target=lambda: answered.update(
            resp=requests.post(f"{url}/generate", json=body, timeout=300)))  # nobody reads it until the end
        abandoned.start()
        deadline = time.monotonic() + 60
        while requests.get(f"{url}/health", timeout=30).json()["running"] == 0 and abandoned.is_alive():
            assert time.monotonic() < deadline, "the requests never ran"
            time.sleep(0.02)
        if abandoned.is_alive():
            break
        assert answered["resp"].json()["version"] == before  # ended unseen: a normal answer, try again
    else:
        pytest.fail("three times the requests ended before /health saw them running")
    version = _sync_both(served, trainer, seed=700)
    served.update_weights(trainer[0].named_parameters(), version)
    assert requests.get(f"{url}/health", timeout=30).json() == {"status": "ok", "version": version, "running": 0}
    abandoned.join(timeout=60)
    got = answered["resp"].json()
    assert got["version"] == before and len(got["completions"]) == 32
    assert {c["weight_version"] for c in got["completions"]} == {before}


def serve_the_base_model(served: ServerGenerator, model_dir, version: int = 0, noise: float = 0.0) -> None:
    """Put the module's server where a freshly started `gigpo serve --model model_dir` is: the base weights at
    version 0 (with `noise` and another `version`: where an earlier run could have left it)."""
    model = load_trainer_model(model_dir)
    if noise:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * noise)
    path = write_weights_file(full_state_dict(model.named_parameters(), ties_lm_head(str(model_dir)), torch.float32))
    try:
        served._post(served.servers[0], "update_weights", {"path": str(path), "version": version})
    finally:
        path.unlink()
    served._version = version


def test_training_resumed_against_the_server_continues_exactly(served, tiny_model_dir, tmp_path, monkeypatch):
    """`gigpo train --resume` on the vllm-server backend, with this module's server as an external one
    (rollout.server_urls: no second engine start). Resumed from checkpoint 1, iteration 2 repeats the
    uninterrupted run's episodes, losses and weights, and the server sampled it from checkpoint 1's weights:
    before each run the server is reset as a restarted server would be, so a resume that skipped the sync to
    the checkpoint would sample from the base model. The untrained policy never acts (zero advantages); an
    entropy bonus moves its weights, so iteration 2 depends on the restored weights and Adam moments."""
    monkeypatch.setenv("GIGPO_SERVER_TOKEN", TOKEN)  # how the trainer's client authenticates its weight syncs
    url = served.servers[0].url
    common = ["rollout.backend=vllm-server", f"rollout.server_urls=[{url}]", f"model.path={tiny_model_dir}",
              "trainer.iterations=2", "trainer.save_every=1", "algorithm.entropy_coef=0.01"]
    reference = tmp_path / "reference"
    # the server as an earlier run left it: other weights at a later version. A fresh run must give it its
    # own start (before, it failed on the version, or silently sampled from the other weights)
    serve_the_base_model(served, tiny_model_dir, version=7, noise=1e-2)
    train(reference, *common)
    assert_generator_holds_the_trainers_weights(metrics_of(reference)[1], tiny_model_dir)
    run = cut_back(reference, tmp_path / "resumed", 1)
    serve_the_base_model(served, tiny_model_dir)
    train(run, *common, resume=True)
    got, want = metrics_of(run)[-1], metrics_of(reference)[-1]
    assert got["iteration"] == want["iteration"] == 2
    assert got["rollout/tokens_generated"] == want["rollout/tokens_generated"]
    assert want["actor/grad_norm"] > 1e-3 and want["loss/kl"] > 0  # the policy moved in iteration 1
    assert_generator_holds_the_trainers_weights(got, tiny_model_dir)  # the server sampled from checkpoint 1
    assert_same_update(got, want, ("loss/kl", "loss/entropy", "actor/grad_norm"))
    assert_same_weights(run, reference, 2, resumed_from=1)
    assert requests.get(f"{url}/version", timeout=5).json() == {"version": 2}
    served._version = 2  # the supervised client's view of the server, for any test after this one


def test_a_run_in_async_mode_names_a_server_that_stops_answering_within_30_s(served, tiny_model_dir, tmp_path):
    """`gigpo train` in rollout.mode=async with async turns, against this module's server as an external one:
    the server is stopped (SIGSTOP) once iteration 1 is logged, while the producer thread plays ahead. The
    run fails with an error naming the server within 30 s (before: when request_timeout_s, 60 s here, ran out)."""
    import subprocess
    import sys

    from support.run import REPO, SMALL, clean_env

    url, pid = served.servers[0].url, served.servers[0].process.pid
    serve_the_base_model(served, tiny_model_dir)
    log = tmp_path / "log"
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *SMALL,
           "rollout.backend=vllm-server", f"rollout.server_urls=[{url}]", f"model.path={tiny_model_dir}",
           "rollout.mode=async", "rollout.turns=async", "rollout.request_timeout_s=60", "trainer.iterations=50",
           "trainer.eval_every=1000", f"trainer.run_dir={tmp_path / 'run'}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**clean_env(), "GIGPO_SERVER_TOKEN": TOKEN})
    stopped = None
    try:
        deadline = time.monotonic() + 400
        while "iter 1/50" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        os.killpg(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        while "stopped answering" not in log.read_text(errors="replace") and time.monotonic() - stopped < 120:
            assert proc.poll() is None or "stopped answering" in log.read_text(errors="replace"), \
                log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        seen = time.monotonic() - stopped
        assert proc.wait(timeout=120) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if stopped is not None:
            os.killpg(pid, signal.SIGCONT)
    text = log.read_text(errors="replace")
    # a rollout's requests or a weight sync, whichever the stop caught: both name the server and the fix
    assert f"{url} stopped answering: /health unanswered" in text, text[-3000:]
    assert "rollout.server_urls" in text
    assert seen < 30
    served._version = requests.get(f"{url}/version", timeout=60).json()["version"]  # the run synced it on
