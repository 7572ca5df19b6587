"""`gigpo view RUN_DIR [--port P]` and `gigpo view RUN_DIR --export FILE.html`."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _cmd_view(args: argparse.Namespace) -> int:
    from gigpo.viewer.run import NotARunError, open_run

    try:
        index = open_run(args.run_dir)
    except NotARunError as exc:
        print(f"gigpo view: {exc}", file=sys.stderr)
        return 2
    if not index.records:  # still opens: the metrics alone are worth a look
        print(f"gigpo view: note: {index.notices[-1]}", file=sys.stderr)
    if args.export:
        from gigpo.viewer.app import export_html

        done = export_html(index.path, Path(args.export), int(args.export_max_mb * 1e6))
        left_out = f"; left out {len(done.omitted)} (--export-max-mb)" if done.omitted else ""
        print(f"gigpo view: wrote {done.path} ({done.bytes / 1e6:.2f} MB, {len(done.included)} records{left_out}); "
              "it opens offline in any current browser")
        return 0
    from gigpo.viewer.app import serve

    token = args.token or os.environ.get("GIGPO_VIEW_TOKEN") or None
    try:
        serve(index.path, args.host, args.port, token)
    except ValueError as exc:
        print(f"gigpo view: {exc}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("view", help="browse a run's episodes, step groups and advantages in a web page",
                              description="Serve a viewer for a run directory (loopback only unless --token is "
                                          "set), or export it as one self-contained HTML file.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (trainer.run_dir of `gigpo train`)")
    p.add_argument("--port", type=int, default=8765, help="port to serve on (default: 8765)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--token", default=None, help="token the page must carry (?token=...; default: $GIGPO_VIEW_TOKEN); "
                                                  "mandatory when --host is not loopback")
    p.add_argument("--export", metavar="FILE.html", default=None,
                   help="write one self-contained HTML file (opens offline) instead of serving")
    p.add_argument("--export-max-mb", type=float, default=20.0,
                   help="size bound of the exported file; records past it are left out, newest and first kept "
                        "(default: 20)")
    p.set_defaults(func=_cmd_view)
