"""`gigpo serve --model DIR --host 127.0.0.1 --port P`: a standalone vLLM generation server."""
from __future__ import annotations

import argparse
import os
import sys


def _cmd_serve(args: argparse.Namespace) -> int:
    from gigpo.infra.owner_watch import watch_server_owner
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.server import check_exposure, serve

    token = args.token or os.environ.get("GIGPO_SERVER_TOKEN") or None
    try:
        check_exposure(args.host, token)
    except ValueError as exc:
        print(f"gigpo serve: {exc}", file=sys.stderr)
        return 2
    watch_server_owner()  # a server a trainer started ends with that trainer, even one killed by SIGKILL
    serve(args.model, args.host, args.port, token, EngineSettings.from_cli(args))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from gigpo.rollout.engine_settings import EngineSettings

    p = subparsers.add_parser("serve", help="serve generation and weight updates for one model over HTTP (vLLM)")
    p.add_argument("--model", required=True, help="model directory (save_pretrained) or HF id")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--token", default=None,
                   help="bearer token required by /update_weights (default: $GIGPO_SERVER_TOKEN); "
                        "mandatory when --host is not loopback")
    EngineSettings.add_cli_options(p)
    p.set_defaults(func=_cmd_serve)
