"""One of two ranks, each with its own in-process vLLM engine (weight_sync=inprocess), started by
torch.distributed.run from test_inprocess_sync.py. Each rank moves its own model by a different seed,
syncs it under the spy and prints one JSON line: the spy's events and the probe gap."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/, for support.*

from support.models import load_trainer_model, perturb  # noqa: E402
from support.sync_spy import spy_on_sync  # noqa: E402


def main(model_dir: str) -> None:
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.weight_sync.verify import SyncVerifier
    from gigpo.rollout.vllm_backend import VLLMGenerator
    from gigpo.trainer.distributed import init_distributed

    info = init_distributed()
    gen = VLLMGenerator(model_dir, EngineSettings(dtype="fp32", enforce_eager=True, weight_sync="inprocess",
                                                  max_num_seqs=8))
    try:
        model = load_trainer_model(Path(model_dir))
        verifier = SyncVerifier(gen, gen.vocab_size, atol=2e-3)
        perturb(model, seed=200 + info.rank)  # the ranks' models differ: each engine must get its own rank's
        with spy_on_sync(model) as spy:
            gen.update_weights([(n, p) for n, p in model.named_parameters() if n != "lm_head.weight"], 1)
        gap = verifier.check(model)
        print("RESULT " + json.dumps({"rank": info.rank, "world": torch.distributed.get_world_size(),
                                      "events": spy.events, "gap": gap}), flush=True)
    finally:
        gen.close()


if __name__ == "__main__":
    main(sys.argv[1])
