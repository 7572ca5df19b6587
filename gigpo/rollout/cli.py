"""`gigpo serve --model DIR --host 127.0.0.1 --port P`: a standalone vLLM generation server."""
from __future__ import annotations

import argparse
import os
import sys


def _cmd_serve(args: argparse.Namespace) -> int:
    from gigpo.rollout.server import check_exposure, serve

    token = args.token or os.environ.get("GIGPO_SERVER_TOKEN") or None
    try:
        check_exposure(args.host, token)
    except ValueError as exc:
        print(f"gigpo serve: {exc}", file=sys.stderr)
        return 2
    engine_args = dict(dtype=args.dtype, seed=args.seed, kv_cache_gb=args.kv_cache_gb,
                       gpu_memory_utilization=args.gpu_memory_utilization,
                       enable_prefix_caching=not args.no_prefix_caching, max_num_seqs=args.max_num_seqs,
                       max_model_len=args.max_model_len, enforce_eager=args.enforce_eager,
                       weight_sync=args.weight_sync)
    serve(args.model, args.host, args.port, token, engine_args)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from gigpo.config import RolloutConfig

    defaults = RolloutConfig()
    p = subparsers.add_parser("serve", help="serve generation and weight updates for one model over HTTP (vLLM)")
    p.add_argument("--model", required=True, help="model directory (save_pretrained) or HF id")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--token", default=None,
                   help="bearer token required by /update_weights (default: $GIGPO_SERVER_TOKEN); "
                        "mandatory when --host is not loopback")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-cache-gb", type=float, default=defaults.kv_cache_gb)
    p.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--enforce-eager", action="store_true", default=defaults.enforce_eager,
                   help="skip torch.compile (faster start, slower generation)")
    p.add_argument("--weight-sync", default=defaults.weight_sync, choices=["shm", "nccl"],
                   help="shm: trainer posts a /dev/shm safetensors path; nccl: trainer broadcasts (NCCL or gloo)")
    p.set_defaults(func=_cmd_serve)
