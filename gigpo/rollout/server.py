"""`gigpo serve`: one vLLM engine behind HTTP (FastAPI + uvicorn).

Endpoints (JSON):
  GET  /health          -> {"status": "ok", "version": v, "running": n}   (answers while n requests run)
  GET  /version         -> {"version": v}
  POST /generate        {"prompts": [[ids]], "settings": {...}} -> {"completions": [...], "version": v}
  POST /update_weights  {"path": "/dev/shm/x.safetensors", "version": v} -> {"version": v}
                        needs "Authorization: Bearer TOKEN" when the server has a token; a server
                        bound beyond loopback refuses to start without one.
Each prompt of a /generate request joins the engine's running batch as it arrives (continuous
batching through `VLLMGenerator.submit`), so concurrent requests, such as an async rollout's one-prompt
requests, are batched together. Prompt i of a request is seeded `settings.seed + i`. A lock serialises
weight updates; the trainer does not generate during a sync, so requests still running when one comes are
those of a client that gave up on this server: the sync waits for them (`wait_for_running_requests`).
A failed weight update answers its error (500, or 409 when requests outlast the wait), and the server's log
keeps the traceback.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import threading
import time
from typing import Any, Iterator, Optional

from pydantic import BaseModel

from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.generator import check_prompts
from gigpo.rollout.types import SamplingSettings

LOOPBACK_NAMES = {"localhost"}
RUNNING_REQUESTS_WAIT_S = 120.0
"""How long a weight update waits for requests still running (a client's that gave up) before refusing."""

logger = logging.getLogger(__name__)


class StillRunning(RuntimeError):
    """Requests outlasted RUNNING_REQUESTS_WAIT_S: syncing now would sample them from two policies."""


def wait_for_running_requests(generator: Any, timeout_s: float = RUNNING_REQUESTS_WAIT_S) -> None:
    """Return once `generator` runs no request. The trainer syncs only with none of its own out, so requests
    running now are a client's that gave up on this server (stopped, or killed mid-rollout); they finish on the
    weights they started with. Before, the sync was refused with a bare 500."""
    running = getattr(generator, "in_flight", 0)
    if not running:
        return
    logger.warning("weight update waits for %d requests still running (a client that gave up on this server)",
                   running)
    deadline = time.monotonic() + timeout_s
    while generator.in_flight:
        if time.monotonic() > deadline:
            raise StillRunning(f"{generator.in_flight} requests still run after {timeout_s:.0f} s: a weight update "
                               "now would sample them from two policies; is another client generating on this "
                               "server?")
        time.sleep(0.05)


class GenerateRequest(BaseModel):
    prompts: list[list[int]]
    settings: dict[str, Any] = {}


class UpdateRequest(BaseModel):
    path: str
    version: int


class TransferRequest(BaseModel):
    """Body of the /weight_transfer/* routes: the group's address (init), the tensors' names, dtypes
    and shapes (update), or the version (commit)."""
    info: Any = None
    version: Optional[int] = None


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: Optional[str]) -> None:
    """Anyone who can post weights controls the policy: beyond loopback, a token is mandatory."""
    if not is_loopback(host) and not token:
        raise ValueError(f"--host {host} listens beyond loopback: set --token (or GIGPO_SERVER_TOKEN) so that "
                         "only the trainer can update weights, or bind to 127.0.0.1")


def create_app(generator: Any, token: Optional[str] = None):
    """A FastAPI app serving `generator` (a VLLMGenerator, or any Generator with load_weights_file)."""
    from fastapi import FastAPI, Header, HTTPException

    app = FastAPI(title="gigpo generation server")
    lock = threading.Lock()
    broken: list[str] = []  # why the engine failed, once it has; /health then says so

    @app.get("/health")
    async def health() -> dict:
        if broken:
            raise HTTPException(status_code=503, detail=f"engine failed: {broken[0]}")
        return {"status": "ok", "version": generator.version, "running": getattr(generator, "in_flight", 0)}

    @app.get("/version")
    async def version() -> dict:
        return {"version": generator.version}

    @app.post("/generate")
    async def generate(req: GenerateRequest) -> dict:
        try:
            settings = SamplingSettings.from_json(req.settings)
            if not req.prompts:
                raise ValueError("prompts must be a non-empty list of token-id lists")
            check_prompts(req.prompts, generator.vocab_size)  # names the bad prompt by its index in the request
            answers = await asyncio.gather(*(_submitted(generator, prompt, _nth(settings, i))
                                             for i, prompt in enumerate(req.prompts)))
        except (ValueError, TypeError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        except Exception as exc:  # the engine itself failed: report unhealthy so a supervisor restarts us
            broken.append(repr(exc))
            raise
        completions = []
        for i, answer in enumerate(answers):  # each came back as its own request's prompt 0
            for c in answer:
                c.prompt_index = i
                completions.append(c)
        return {"completions": [c.to_json() for c in completions], "version": generator.version}

    def authorize(authorization: Optional[str]) -> None:
        if token and not secrets.compare_digest(authorization or "", f"Bearer {token}"):
            raise HTTPException(status_code=401, detail="weight updates need 'Authorization: Bearer <token>'")

    @app.post("/update_weights")
    def update_weights(req: UpdateRequest, authorization: Optional[str] = Header(None)) -> dict:
        authorize(authorization)
        with answered_errors():
            with lock:
                wait_for_running_requests(generator)
                generator.load_weights_file(req.path, req.version)
        return {"version": generator.version}

    # Weight sync by broadcast (gigpo/rollout/weight_sync/broadcast.py): `init` joins the trainer's group, `update`
    # receives one sync. Both block while the trainer is on the other end, so they do not take the
    # generation lock; the trainer does not generate during a sync.
    @app.post("/weight_transfer/{step}")
    def weight_transfer(step: str, req: TransferRequest, authorization: Optional[str] = Header(None)) -> dict:
        authorize(authorization)
        rpc = {"init": "gigpo_init_broadcast", "update": "gigpo_receive_broadcast"}
        if step == "commit":
            if req.version is None:
                raise HTTPException(status_code=400, detail="/weight_transfer/commit needs a version")
            with answered_errors(), lock:
                wait_for_running_requests(generator)
                generator.commit_version(req.version)
        elif step in rpc:
            if req.info is None:
                raise HTTPException(status_code=400, detail=f"/weight_transfer/{step} needs an info body")
            with answered_errors():
                if step == "update":
                    wait_for_running_requests(generator)
                generator.llm.collective_rpc(rpc[step], args=(req.info,))
        else:
            raise HTTPException(status_code=404, detail=f"unknown weight transfer step {step!r}; "
                                                        f"use one of {', '.join([*rpc, 'commit'])}")
        return {"version": generator.version}

    return app


@contextlib.contextmanager
def answered_errors() -> Iterator[None]:
    """A weight route's failure as an HTTP answer that says what failed: 400 for a bad request, 409 for requests
    that outlasted the wait, 500 with the error for anything else (the traceback goes to the server's log)."""
    from fastapi import HTTPException

    try:
        yield
    except HTTPException:
        raise
    except (ValueError, FileNotFoundError) as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from exc
    except StillRunning as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
    except Exception as exc:
        logger.exception("weight update failed")
        raise HTTPException(status_code=500, detail=f"{type(exc).__name__}: {exc}") from exc


def _nth(settings: SamplingSettings, i: int) -> SamplingSettings:
    """Settings of a request's prompt i: seeded `seed + i`, as `generate` seeds a batch."""
    from dataclasses import replace

    return settings if settings.seed is None else replace(settings, seed=settings.seed + i)


def _submitted(generator: Any, prompt: list[int], settings: SamplingSettings) -> "asyncio.Future":
    """A future of one prompt's completions, resolved from the engine's stream thread."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def done(answer) -> None:
        def resolve() -> None:
            if future.done():
                return
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)
        loop.call_soon_threadsafe(resolve)

    generator.submit(prompt, settings, done)
    return future


def serve(model: str, host: str, port: int, token: Optional[str], engine: EngineSettings) -> None:
    """Start the engine, then serve until interrupted."""
    import uvicorn

    from gigpo.rollout.vllm_backend import VLLMGenerator

    check_exposure(host, token)
    generator = VLLMGenerator(model, engine)
    try:
        uvicorn.run(create_app(generator, token), host=host, port=port, log_level="warning")
    finally:
        generator.close()
