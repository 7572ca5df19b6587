"""One rank of tests/trainer/test_collectives.py: every collective helper the loop uses, under each
default-group backend given on the command line (`cuda:gloo` serves CUDA tensors only, as NCCL does), one
world after the other in the same process (a process's start and imports cost more than its collectives).

    python collectives_worker.py RANK WORLD OUT_DIR BACKEND:PORT [BACKEND:PORT ...]

Writes OUT_DIR/rank{RANK}-{BACKEND}.json with what each helper returned; a helper that hands a group a tensor
its backend does not serve raises (torch: "No backend type associated with device type cpu"), and the rank
exits non-zero with that error and the backend on stderr. Each world gets its own port: the store of the one
before may still hold its port while it closes.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(rank: int, world: int, out_dir: str, worlds: list[str]) -> None:
    for spec in worlds:
        backend, port = spec.rsplit(":", 1)
        try:
            one_world(rank, world, int(port), backend, out_dir)
        except Exception as exc:
            raise RuntimeError(f"under backend {backend}: {exc}") from exc


def one_world(rank: int, world: int, port: int, backend: str, out_dir: str) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    from gigpo.trainer import distributed
    from gigpo.trainer.distributed import (all_gather_objects, all_reduce_floats, any_rank, barrier, broadcast_object,
                                           init_distributed, scatter_objects, shutdown_distributed)

    info = init_distributed(backend=backend)
    result = {
        "any_rank_last": any_rank(rank == world - 1),  # the engines' NaN check before every optimizer step
        "any_rank_none": any_rank(False),
        "gathered": all_gather_objects({"rank": rank, "loss/policy": 0.5 * rank}),  # the engines' metric sums
        "broadcast": broadcast_object(f"from rank {rank}"),  # setup.py's model path
        # a server's groups, from rank 0
        "scattered": scatter_objects([f"to rank {r}" for r in range(world)] if rank == 0 else None),
        "summed": all_reduce_floats([1.0 + rank, 2.0]),  # the update's loss denominators
        "largest": all_reduce_floats([float(rank), 3.0], op="max"),  # its micro-batch counts
        "side_group": distributed.side_group() is not None,
    }
    barrier()  # checkpoint.py's
    shutdown_distributed()
    Path(out_dir, f"rank{info.rank}-{backend}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:])
