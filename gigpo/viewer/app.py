"""The viewer's page, its small HTTP server (FastAPI) and the self-contained HTML export.

One page (index.html with viewer.css and viewer.js inlined) serves both: from the server it fetches
/api/run and /api/record/NAME; exported, it reads the same data embedded in the file (records as the
stored gzip bytes, base64), so the file opens offline with no server and no network.
"""
from __future__ import annotations

import base64
import json
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from gigpo.rollout.server import is_loopback
from gigpo.viewer.run import RunIndex, open_run, record_bytes

STATIC = Path(__file__).parent / "static"
_SLOT = re.compile(r"/\*(CSS|JS|BUNDLE)\*/")


def page_html(bundle: dict[str, Any]) -> str:
    """The viewer page with its CSS, JS and `bundle` (the data, or {"mode": "server"}) inlined."""
    parts = {"CSS": (STATIC / "viewer.css").read_text(), "JS": (STATIC / "viewer.js").read_text(),
             # inside <script>, "</" could end the element early; "<\/" is the same JSON string
             "BUNDLE": json.dumps(bundle, ensure_ascii=False).replace("</", "<\\/")}
    return _SLOT.sub(lambda m: parts[m.group(1)], (STATIC / "index.html").read_text())  # one pass: no slot in data


def check_exposure(host: str, token: Optional[str]) -> None:
    """A run's episodes can hold private task data: beyond loopback, a token is mandatory."""
    if not is_loopback(host) and not token:
        raise ValueError(f"--host {host} listens beyond loopback: set --token (or GIGPO_VIEW_TOKEN) and open the "
                         "printed URL with ?token=..., or bind to 127.0.0.1")


def check_port_free(host: str, port: int) -> None:
    """Fail with a clear message before uvicorn would print a traceback-like one."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ValueError(f"cannot listen on {host}:{port} ({exc.strerror}); pass another --port") from None


def create_app(run_dir: Path, token: Optional[str] = None):
    """A FastAPI app serving the viewer for `run_dir` (re-indexed on each overview, so a live run grows)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

    app = FastAPI(title="gigpo view", docs_url=None, redoc_url=None, openapi_url=None)
    page = page_html({"mode": "server"})
    state: dict[str, RunIndex] = {"index": open_run(run_dir)}

    @app.middleware("http")
    async def require_token(request: Request, call_next):
        if token:
            given = request.query_params.get("token") or request.headers.get("authorization", "").removeprefix("Bearer ")
            if not secrets.compare_digest(given.encode(), token.encode()):
                return PlainTextResponse("this viewer needs its token: open the URL it printed (…/?token=...)",
                                         status_code=401)
        return await call_next(request)

    @app.get("/", response_class=HTMLResponse)
    async def index_page() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/api/run")
    def run_overview() -> JSONResponse:
        state["index"] = open_run(run_dir)
        return JSONResponse(state["index"].overview(), headers={"Cache-Control": "no-store"})

    @app.get("/api/record/{name}")
    def record(name: str) -> Response:
        data = record_bytes(state["index"], name)
        if data is None:  # also the answer to any path trick: only indexed names are served
            state["index"] = open_run(run_dir)
            data = record_bytes(state["index"], name)
        if data is None:
            return PlainTextResponse(f"no record {name!r} in {run_dir}", status_code=404)
        # the stored gzip bytes as they are: the browser inflates them (Content-Encoding)
        return Response(data, media_type="application/x-ndjson", headers={"Content-Encoding": "gzip"})

    return app


def serve(run_dir: Path, host: str, port: int, token: Optional[str]) -> None:
    import uvicorn

    check_exposure(host, token)
    check_port_free(host, port)
    app = create_app(run_dir, token)
    shown = f"[{host}]" if ":" in host else host
    print(f"gigpo view: serving {run_dir} at http://{shown}:{port}/{f'?token={token}' if token else ''} "
          "(Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


@dataclass(frozen=True)
class Export:
    path: Path
    bytes: int
    included: list[str]
    omitted: list[str]


def export_order(index: RunIndex) -> list[str]:
    """Records by how much a reader needs them when not all fit: the last and first of each phase, then
    the rest from the newest back."""
    names = [r["name"] for r in index.records]
    ends = []
    for phase in ("train", "eval"):
        of_phase = [r["name"] for r in index.records if r["phase"] == phase]
        ends += of_phase[-1:] + of_phase[:1]
    first = list(dict.fromkeys(ends))
    return first + [n for n in reversed(names) if n not in first]


def export_html(run_dir: Path, out: Path, max_bytes: int) -> Export:
    """Write the run as one HTML file of at most about max_bytes; records that would pass it are left out
    (the page says which)."""
    index = open_run(run_dir)
    overview = index.overview()
    base = len(page_html({"mode": "export", "run": overview, "records": {}}).encode("utf-8"))
    used, embedded, omitted = base, {}, []
    for name in export_order(index):
        data = base64.b64encode(record_bytes(index, name)).decode("ascii")
        if used + len(data) + len(name) + 8 > max_bytes:
            omitted.append(name)
            continue
        embedded[name] = data
        used += len(data) + len(name) + 8
    if omitted:
        overview["notices"] = [*overview["notices"], f"this export leaves out {len(omitted)} of {len(index.records)} "
                               f"records to stay under {max_bytes / 1e6:.0f} MB: {', '.join(sorted(omitted)[:12])}"
                               f"{' …' if len(omitted) > 12 else ''}"]
    html = page_html({"mode": "export", "run": overview, "records": embedded})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    kept = [n for n in (r["name"] for r in index.records) if n in embedded]
    return Export(out, out.stat().st_size, kept, sorted(omitted))
