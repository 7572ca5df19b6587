"""Trainer-side client for `gigpo serve`: starts and supervises servers, or uses given URLs.

Requests are spread over the servers in contiguous chunks (prompt i keeps seed `seed + i` wherever
it runs). While any request is in flight (a batched call's chunk, an async turn's one-prompt request,
a weight sync) the client watches the busy server: a supervised process that exited, or any server
whose /health has not answered for `unresponsive_s`, is declared dead, within ~13 s whatever
`request_timeout_s` says. A supervised server is then killed, restarted, re-synced to the current
weights and given its work again; an external server fails the call with a message naming it and
what to do. No request waits longer than `request_timeout_s`.
"""
from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import logging

import requests
import torch

from gigpo.config import RolloutConfig
from gigpo.infra.dtypes import torch_dtype
from gigpo.infra.owner_watch import SERVER_OWNER_ENV, this_process
from gigpo.infra.ports import free_port
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.generator import CompletionCallback, Generator
from gigpo.rollout.types import Completion, SamplingSettings
from gigpo.rollout.weight_sync.tensors import ties_lm_head

HEALTH_TIMEOUT_S = 3.0
HEALTH_EVERY_S = 2.0
UNRESPONSIVE_S = 8.0
"""A server whose health check has failed for this long is dead: with the check period and timeout,
detection takes at most ~13 s, under the 30 s the rollout promises."""
STARTUP_TIMEOUT_S = 600.0
MAX_RESTARTS_PER_CALL = 2

logger = logging.getLogger(__name__)
_DEFAULTS = RolloutConfig()


class ServerError(RuntimeError):
    """A generation server failed in a way the client cannot repair."""


class ServerUnresponsive(requests.ConnectionError):
    """A request abandoned because its server was seen dead (a connection fault, handled as one)."""


@dataclass
class Server:
    url: str
    process: Optional[subprocess.Popen] = None
    """Set when this client started the server (and so may restart it)."""
    log_path: Optional[Path] = None
    restarts: int = field(default=0)
    answered: float = 0.0
    """monotonic time of the last /health answer (0: none watched yet)."""
    probed: float = 0.0
    """monotonic time of the last /health probe, so concurrent watchers share one probe per period."""
    probe_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def supervised(self) -> bool:
        return self.process is not None


class ServerGenerator(Generator):
    """Generator over one or more `gigpo serve` processes."""

    rollout_backend = "vllm-server"

    def __init__(self, model_path: str, engine: EngineSettings = EngineSettings(), *, urls: Iterable[str] = (),
                 num_servers: int = _DEFAULTS.num_servers, request_timeout_s: float = _DEFAULTS.request_timeout_s,
                 token: Optional[str] = None, unresponsive_s: float = UNRESPONSIVE_S,
                 log_dir: Optional[str] = None) -> None:
        super().__init__()
        self.model_path = str(model_path)
        self.request_timeout_s = request_timeout_s
        self.unresponsive_s = unresponsive_s
        self.token = token or os.environ.get("GIGPO_SERVER_TOKEN") or None
        self.engine = engine
        self.torch_dtype = torch_dtype(engine.dtype)
        self.log_dir = Path(log_dir) if log_dir else None
        self.weights_path: Optional[Path] = None
        """The current weights, kept so a restarted server can be re-synced."""
        self.servers: list[Server] = []
        self._nccl_senders: dict[str, Any] = {}
        self._tied: Optional[bool] = None
        urls = [u.rstrip("/") for u in urls]
        self._next_server = itertools.count()
        self._restart_lock = threading.Lock()
        self._in_flight: dict[int, _InFlight] = {}
        """`submit`'s requests still running, watched by one thread (`_watch_submitted`)."""
        self._tickets = itertools.count()
        self._in_flight_lock = threading.Lock()
        self._watcher: Optional[threading.Thread] = None
        self._closed = threading.Event()
        try:
            if urls:
                self.servers = [Server(u) for u in urls]
                for s in self.servers:
                    self._require_healthy(s, deadline=time.monotonic() + unresponsive_s)
            else:
                self.servers = [self._start_server() for _ in range(num_servers)]
                for s in self.servers:
                    self._wait_ready(s)
        except BaseException:
            self.close()
            raise

    @property
    def weight_sync(self) -> str:
        """How weights reach the servers (shm or nccl; gigpo.rollout.weight_sync.transports)."""
        return self.engine.weight_sync

    @property
    def tied_lm_head(self) -> bool:
        """The model shares its LM head with the input embedding (read from its config once)."""
        if self._tied is None:
            self._tied = ties_lm_head(self.model_path)
        return self._tied

    @property
    def num_replicas(self) -> int:
        return len(self.servers)

    # ------------------------------------------------------------------ processes
    def _start_server(self, server: Optional[Server] = None) -> Server:
        port = free_port()
        cmd = [sys.executable, "-m", "gigpo.cli", "serve", "--model", self.model_path, "--host", "127.0.0.1",
               "--port", str(port), *self.engine.cli_args()]
        env = {**os.environ, SERVER_OWNER_ENV: this_process()}  # the server ends with this process (owner_watch)
        if self.token:
            env["GIGPO_SERVER_TOKEN"] = self.token
        log_path = (self.log_dir or Path(os.environ.get("TMPDIR", "/tmp"))) / f"gigpo-serve-{port}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            # Own session: the server's vLLM children can be stopped together with it.
            process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if server is None:
            return Server(f"http://127.0.0.1:{port}", process, log_path)
        server.url, server.process, server.log_path = f"http://127.0.0.1:{port}", process, log_path
        server.answered = server.probed = 0.0
        server.restarts += 1
        return server

    def _wait_ready(self, server: Server) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if server.process is not None and server.process.poll() is not None:
                raise ServerError(f"generation server {server.url} exited with code {server.process.returncode} "
                                  f"while starting; see its log {server.log_path}:\n{_tail(server.log_path)}")
            if self._healthy(server):
                return
            time.sleep(0.5)
        self._stop(server)
        raise ServerError(f"generation server {server.url} did not become healthy within {STARTUP_TIMEOUT_S:.0f} s; "
                          f"see {server.log_path}")

    def _stop(self, server: Server) -> None:
        proc = server.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)

    def _kill(self, server: Server) -> None:
        """SIGKILL a supervised server's whole session (its vLLM workers too): a hung or stopped process
        ignores SIGTERM. Its open requests then fail at once."""
        if server.process is None:
            return
        try:
            os.killpg(server.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _restart(self, server: Server) -> None:
        """Replace a dead supervised server and bring it to the current weights."""
        self._kill(server)  # it failed: no graceful stop (a stopped process would sit out SIGTERM's 10 s)
        self._start_server(server)
        self._wait_ready(server)
        if self.weights_path is not None:
            self._post_weights(server, self.weights_path, self.version)

    # ------------------------------------------------------------------ health
    def _healthy(self, server: Server) -> bool:
        try:
            return requests.get(f"{server.url}/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
        except requests.RequestException:
            return False

    def _failure(self, server: Server, since: float) -> Optional[str]:
        """Why `server` counts as dead for work under way since `since`, or None while it is alive: its
        process exited, or its /health has not answered for `unresponsive_s`. /health is probed at most
        once per HEALTH_EVERY_S, whichever thread asks."""
        if server.process is not None and server.process.poll() is not None:
            return f"its process exited with code {server.process.returncode}"
        with server.probe_lock:
            if time.monotonic() - server.probed >= HEALTH_EVERY_S:
                if self._healthy(server):
                    server.answered = time.monotonic()
                server.probed = time.monotonic()
        silent = time.monotonic() - max(server.answered, since)
        return f"/health unanswered for {silent:.0f} s" if silent > self.unresponsive_s else None

    def _watched(self, server: Server, call, *args: Any) -> Any:
        """`call(*args)`, a blocking request to `server`, given up with ServerUnresponsive as soon as the
        server is seen dead, not only when its request timeout runs out (a weight sync of a hung server)."""
        future, since = _in_background(call, *args), time.monotonic()
        while not wait([future], timeout=HEALTH_EVERY_S).done:
            failure = self._failure(server, since)
            if failure is not None:
                raise ServerUnresponsive(f"{server.url} stopped answering: {failure}")
        return future.result()

    def _require_healthy(self, server: Server, deadline: float) -> None:
        while not self._healthy(server):
            if time.monotonic() > deadline:
                raise ServerError(f"generation server {server.url} does not answer /health; start it with "
                                  "`gigpo serve --model DIR --port P` or fix rollout.server_urls")
            time.sleep(1.0)

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: list[list[int]], settings: SamplingSettings) -> list[Completion]:
        """Spread contiguous chunks over the servers; watch them; repair supervised ones."""
        if not isinstance(prompts, list) or not prompts:
            raise ValueError("prompts must be a non-empty list of token-id lists")
        chunks = {k: b for k, b in enumerate(_split(len(prompts), len(self.servers))) if b[0] < b[1]}
        results: dict[int, list[Completion]] = {}
        restarts = {k: 0 for k in chunks}
        futures: dict[int, Future] = {}
        started: dict[int, float] = {}

        def submit(k: int) -> None:
            lo, hi = chunks[k]
            futures[k] = _in_background(self._post_generate, self.servers[k], prompts[lo:hi], lo, settings)
            started[k] = time.monotonic()

        for k in chunks:
            submit(k)
        while futures:
            wait(list(futures.values()), timeout=HEALTH_EVERY_S, return_when=FIRST_COMPLETED)
            for k, future in list(futures.items()):
                failure = self._chunk_failure(k, future, started[k])
                if future.done() and failure is None:
                    results[k] = future.result()
                    del futures[k]
                elif failure is not None:
                    del futures[k]
                    server = self.servers[k]
                    if not server.supervised:
                        raise _reported(ServerError(f"generation server {server.url} failed: {failure}. It is external "
                                                    "(rollout.server_urls), so it cannot be restarted from here: "
                                                    "restart it and resume the run, or remove it from "
                                                    "rollout.server_urls"))
                    if restarts[k] >= MAX_RESTARTS_PER_CALL:
                        raise ServerError(f"generation server {server.url} failed again after {restarts[k]} "
                                          f"restarts in one call: {failure}; see {server.log_path}")
                    restarts[k] += 1
                    logger.warning("generation server %s failed (%s); restarting at weight version %d",
                                   server.url, failure, self.version)
                    self._restart(server)
                    submit(k)
        return [c for k in sorted(results) for c in results[k]]

    @property
    def can_submit(self) -> bool:
        return True

    def submit(self, prompt: list[int], settings: SamplingSettings, done: CompletionCallback) -> None:
        """Post one prompt on its own (servers batch concurrent requests); servers take turns.

        A request that fails on a supervised server restarts it (once per failure, however many requests
        saw it) and is sent again, up to MAX_RESTARTS_PER_CALL times. One thread watches the servers with
        requests in flight as `generate` does (`_watch_submitted`): a hung supervised server is killed,
        so its requests fail and restart it; a hung external one fails its requests with a ServerError.
        """
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch_submitted, name="gigpo-server-watch", daemon=True)
            self._watcher.start()
        _in_background(self._submit_one, list(map(int, prompt)), settings, _Once(done),
                       next(self._next_server) % len(self.servers))

    def _submit_one(self, prompt: list[int], settings: SamplingSettings, done: "_Once", k: int) -> None:
        for attempt in range(MAX_RESTARTS_PER_CALL + 1):
            server = self.servers[k]
            incarnation = server.restarts
            ticket = self._track(_InFlight(server, incarnation, time.monotonic(), done))
            try:
                answer = self._post_generate(server, [prompt], 0, settings)
            except requests.RequestException as exc:
                self._untrack(ticket)
                if not server.supervised or attempt == MAX_RESTARTS_PER_CALL:
                    done(ServerError(f"generation server {server.url} failed: {exc}"
                                     + ("" if server.supervised else " (external: restart it and resume the run)")))
                    return
                with self._restart_lock:
                    if server.restarts == incarnation:  # the first request to see the failure restarts it
                        logger.warning("generation server %s failed (%s); restarting", server.url, exc)
                        self._restart(server)
                continue
            except BaseException as exc:  # bad input, a missed sync: not a server fault
                self._untrack(ticket)
                done(exc)
                return
            self._untrack(ticket)
            done(answer)
            return

    def _track(self, request: "_InFlight") -> int:
        with self._in_flight_lock:
            ticket = next(self._tickets)
            self._in_flight[ticket] = request
        return ticket

    def _untrack(self, ticket: int) -> None:
        with self._in_flight_lock:
            self._in_flight.pop(ticket, None)

    def _watch_submitted(self) -> None:
        """Every HEALTH_EVERY_S, the servers with `submit` requests in flight: one seen dead is killed
        (supervised: its requests fail now, and the first to fail restarts it) or, external, its
        requests fail with an error that names it."""
        while not self._closed.wait(HEALTH_EVERY_S):
            with self._in_flight_lock:  # requests per server, sent to its current process
                busy: dict[int, list[_InFlight]] = {}
                for request in self._in_flight.values():
                    if request.incarnation == request.server.restarts:
                        busy.setdefault(id(request.server), []).append(request)
            for waiting in busy.values():
                server = waiting[0].server
                failure = self._failure(server, min(r.started for r in waiting))
                if failure is None:
                    continue
                if server.supervised:
                    logger.warning("generation server %s failed (%s); killing it so its requests restart it",
                                   server.url, failure)
                    self._kill(server)
                    continue
                error = ServerError(f"generation server {server.url} stopped answering: {failure}. It is external "
                                    "(rollout.server_urls), so it cannot be restarted from here: restart it and "
                                    "resume the run, or remove it from rollout.server_urls")
                if not any(request.done.called for request in waiting):
                    _reported(error)
                for request in waiting:
                    request.done(error)

    def _chunk_failure(self, k: int, future: Future, started: float) -> Optional[str]:
        """Why server k's request counts as failed, or None while it is fine."""
        if future.done():
            exc = future.exception()
            if exc is None:
                return None
            if isinstance(exc, requests.RequestException):
                return f"request failed: {exc}"
            raise exc  # bad input (ValueError) or a version mismatch: not a server fault
        if time.monotonic() - started > self.request_timeout_s:
            return f"no answer within request_timeout_s={self.request_timeout_s}"
        return self._failure(self.servers[k], started)

    def _post_generate(self, server: Server, prompts: list[list[int]], offset: int,
                       settings: SamplingSettings) -> list[Completion]:
        chunk_settings = settings.to_json()
        if settings.seed is not None:
            chunk_settings["seed"] = settings.seed + offset  # prompt i is seeded seed + i on any split
        resp = requests.post(f"{server.url}/generate", json={"prompts": prompts, "settings": chunk_settings},
                             timeout=(HEALTH_TIMEOUT_S, self.request_timeout_s))
        if resp.status_code == 400:
            raise ValueError(resp.json().get("detail", resp.text))
        if 400 < resp.status_code < 500:  # our request is wrong: restarting the server would not help
            raise ServerError(f"server {server.url} rejected the generate request ({resp.status_code}): {resp.text}")
        resp.raise_for_status()  # 5xx: the server broke; counted as a server failure
        body = resp.json()
        if body["version"] != self.version:
            raise ServerError(f"server {server.url} generated with weight version {body['version']}, "
                              f"expected {self.version}: it missed a weight sync")
        out = [Completion.from_json(c) for c in body["completions"]]
        for c in out:
            c.prompt_index += offset
        return out

    # ------------------------------------------------------------------ weights
    def serve_weights_file(self, path: Path, version: int) -> None:
        """Have every server load the weights file `path` as `version` (the engine side of a file sync,
        gigpo.rollout.weight_sync.transports). The file stays until the next sync, so a restarted server
        can load it; servers on another machine cannot read it (use the GPU/NCCL path there, see
        docs/generation.md)."""
        previous, self.weights_path, self._version = self.weights_path, path, version
        if previous is not None:
            previous.unlink(missing_ok=True)
        for server in self.servers:
            try:
                self._post_weights(server, path, version)
            except requests.RequestException as exc:
                if not server.supervised:
                    raise _reported(ServerError(f"generation server {server.url} failed to take weights version "
                                                f"{version}: {exc}; restart it or remove it from rollout.server_urls")
                                    ) from exc
                logger.warning("server %s failed during weight sync (%s); restarting", server.url, exc)
                self._restart(server)

    def broadcast_to_servers(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> None:
        """Broadcast (NCCL on GPUs, gloo on CPUs): one group per server, opened at the first sync at the
        address on this machine's route to that server, so a server on another machine can join it.

        Each server's sync is watched like a request: a server that stops answering mid-broadcast is named
        within ~13 s, not when the group's 300 s timeout runs out. Its group is dropped (a broadcast cut
        short leaves it unusable), a supervised server is restarted and sent the weights on a new group,
        and the abandoned sync never commits the version."""
        for server in self.servers:
            try:
                self._broadcast_watched(server, named_tensors, version)
            except (requests.RequestException, RuntimeError) as exc:
                self._nccl_senders.pop(server.url, None)
                if not server.supervised:
                    raise _reported(ServerError(f"generation server {server.url} failed to take weights version "
                                                f"{version} by broadcast: {exc}; restart it and resume the run, "
                                                "or remove it from rollout.server_urls")) from exc
                logger.warning("server %s failed during a broadcast weight sync (%s); restarting", server.url, exc)
                self._restart(server)
                self._broadcast_watched(server, named_tensors, version)
        self._version = version

    def _broadcast_watched(self, server: Server, named_tensors: list[tuple[str, torch.Tensor]],
                           version: int) -> None:
        given_up = threading.Event()
        try:
            self._watched(server, self._broadcast_to, server, named_tensors, version, given_up)
        except BaseException:
            given_up.set()
            raise

    def _broadcast_to(self, server: Server, named_tensors: list[tuple[str, torch.Tensor]], version: int,
                      given_up: threading.Event) -> None:
        from urllib.parse import urlparse

        from gigpo.rollout.weight_sync.broadcast import BroadcastWeightSender, HTTPClient, local_address_towards

        sender = self._nccl_senders.get(server.url)
        if sender is None:
            client = HTTPClient(server.url, self.token, self.request_timeout_s)
            address = local_address_towards(urlparse(server.url).hostname or "127.0.0.1")
            sender = BroadcastWeightSender(client, master_address=address, master_port=free_port(address),
                                           num_workers=1, tied_lm_head=self.tied_lm_head,
                                           shares_gpu=server.supervised, dtype=self.torch_dtype)
            if given_up.is_set():
                return
            self._nccl_senders[server.url] = sender
        sender.send(named_tensors)
        if not given_up.is_set():  # a sync given up on must not mark the server current when it wakes
            self._post(server, "weight_transfer/commit", {"version": version})

    def _post(self, server: Server, route: str, body: dict) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        resp = requests.post(f"{server.url}/{route}", json=body, headers=headers,
                             timeout=(HEALTH_TIMEOUT_S, self.request_timeout_s))
        if resp.status_code in (400, 401):
            raise ServerError(f"server {server.url} refused {route}: {resp.json().get('detail')}")
        if resp.status_code >= 400:  # an HTTPError still (a supervised server is restarted), saying what failed
            raise requests.HTTPError(f"server {server.url} failed {route} ({resp.status_code}): {_detail(resp)}",
                                     response=resp)

    def _post_weights(self, server: Server, path: Path, version: int) -> None:
        self._watched(server, self._post, server, "update_weights", {"path": str(path), "version": version})

    def close(self) -> None:
        self._closed.set()
        for server in self.servers:
            self._stop(server)
        if self.weights_path is not None:
            self.weights_path.unlink(missing_ok=True)
            self.weights_path = None


def _detail(resp: requests.Response) -> str:
    """What a failed answer says: the server's `detail`, else the start of its body."""
    try:
        return str(resp.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:500]


def _reported(error: ServerError) -> ServerError:
    """`error`, logged now: the run's traceback comes only after its shutdown (the env pool, a producer
    thread's job), which may outlast the 30 s in which a dead server must be seen."""
    logger.error("%s", error)
    return error


def _in_background(call: Callable[..., Any], *args: Any) -> Future:
    """`call(*args)` on a daemon thread of its own. A request given up on a hung server stays blocked until
    its timeout; in a pool's worker it would also hold the process at exit (pools join their threads)."""
    future: Future = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name="gigpo-server-request", daemon=True).start()
    return future


@dataclass
class _InFlight:
    """One `submit` request under way: where it went, since when, and its (once-only) callback."""
    server: Server
    incarnation: int
    started: float
    done: "_Once"


class _Once:
    """A completion callback that passes on its first call only: the watcher may fail a request whose
    own thread answers later."""

    def __init__(self, done: CompletionCallback) -> None:
        self._done, self._lock, self.called = done, threading.Lock(), False

    def __call__(self, answer: Any) -> None:
        with self._lock:
            if self.called:
                return
            self.called = True
        self._done(answer)


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) bounds of n items over `parts` servers, sizes differing by at most one."""
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _tail(path: Optional[Path], lines: int = 20) -> str:
    if path is None or not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
