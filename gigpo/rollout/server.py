"""`gigpo serve`: one vLLM engine behind HTTP (FastAPI + uvicorn).

Endpoints (JSON):
  GET  /health          -> {"status": "ok", "version": v}   (answers while a generation runs)
  GET  /version         -> {"version": v}
  POST /generate        {"prompts": [[ids]], "settings": {...}} -> {"completions": [...], "version": v}
  POST /update_weights  {"path": "/dev/shm/x.safetensors", "version": v} -> {"version": v}
                        needs "Authorization: Bearer TOKEN" when the server has a token; a server
                        bound beyond loopback refuses to start without one.
The engine is not thread-safe: one lock serialises generate and update_weights.
"""
from __future__ import annotations

import ipaddress
import secrets
import threading
from typing import Any, Optional

from pydantic import BaseModel

from gigpo.rollout.types import SamplingSettings

LOOPBACK_NAMES = {"localhost"}


class GenerateRequest(BaseModel):
    prompts: list[list[int]]
    settings: dict[str, Any] = {}


class UpdateRequest(BaseModel):
    path: str
    version: int


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

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "version": generator.version}

    @app.get("/version")
    async def version() -> dict:
        return {"version": generator.version}

    @app.post("/generate")
    def generate(req: GenerateRequest) -> dict:
        try:
            settings = SamplingSettings.from_json(req.settings)
            with lock:
                completions = generator.generate(req.prompts, settings)
                current = generator.version
        except (ValueError, TypeError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return {"completions": [c.to_json() for c in completions], "version": current}

    @app.post("/update_weights")
    def update_weights(req: UpdateRequest, authorization: Optional[str] = Header(None)) -> dict:
        if token and not secrets.compare_digest(authorization or "", f"Bearer {token}"):
            raise HTTPException(status_code=401, detail="update_weights needs 'Authorization: Bearer <token>'")
        try:
            with lock:
                generator.load_weights_file(req.path, req.version)
        except (ValueError, FileNotFoundError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return {"version": generator.version}

    return app


def serve(model: str, host: str, port: int, token: Optional[str], engine_args: dict[str, Any]) -> None:
    """Start the engine, then serve until interrupted."""
    import uvicorn

    from gigpo.rollout.vllm_backend import VLLMGenerator

    check_exposure(host, token)
    generator = VLLMGenerator(model, **engine_args)
    try:
        uvicorn.run(create_app(generator, token), host=host, port=port, log_level="warning")
    finally:
        generator.close()
