"""Dynamic sampling (algorithm.dynamic_sampling, as in DAPO): a task group whose episodes all got the same
return has zero group-relative advantage and teaches nothing, so the rollout re-draws groups until it holds
B informative ones. Called from the loop's `play`, on the producer thread in async mode."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from gigpo.infra.seeds import rank_sampling_seed, rollout_sampling_seed, train_seeds
from gigpo.trainer.nonfinite import stop_on_nonfinite_rows

if TYPE_CHECKING:
    from gigpo.advantage.rows import StepRows
    from gigpo.rollout.types import SamplingSettings
    from gigpo.trainer.setup import Run


def redraw_uninformative(run: Run, iteration: int, rows: "StepRows", episodes: list, settings: "SamplingSettings",
                         metrics: dict[str, float]) -> tuple["StepRows", list]:
    """Dynamic sampling: re-draw task groups until B have differing returns (or `max_resample` re-draws);
    keep the first B of those. Each rank re-draws its own share of the groups until its share has differing
    returns, so no rank waits on another mid-rollout. Every step played counts toward the env-step budget."""
    from gigpo.advantage.rows import StepRows
    from gigpo.advantage.sampling import informative_groups
    from gigpo.rollout.collect import rollout

    config, e, a = run.config, run.config.env, run.config.algorithm
    informative = lambda r: {int(g) for g in r.group[informative_groups(r)]}  # noqa: E731
    share, generator = run.share.of(e.num_groups), run.pipeline.generator
    draws, keep = [rows], informative(rows)
    for draw in range(1, a.max_resample + 1):
        if len(keep) >= len(share):
            break
        seed = rank_sampling_seed(rollout_sampling_seed(config.trainer.seed, iteration, draw), run.share.rank,
                                  per_request=generator.turns == "async")
        with stop_on_nonfinite_rows(f"iteration {iteration}, re-draw {draw}"):
            extra = rollout(run.pool, generator, run.prompt_fn,
                            train_seeds(config, iteration, draw)[share.start:share.stop], e.group_size,
                            replace(settings, seed=seed), config.rollout.max_prompt_tokens,
                            group_offset=draw * e.num_groups + share.start)
        draws.append(extra.steps)
        episodes = episodes + extra.episodes
        keep |= informative(draws[-1])
        metrics["rollout/draws"] = float(draw + 1)
    kept = sorted(keep)[: len(share)]
    metrics["rollout/kept_groups"] = float(len(kept))
    rows = StepRows.concat(draws)
    metrics["rollout/env_steps"] = float(len(rows))
    rows = rows.select(np.isin(rows.group, kept))
    metrics["rollout/trained_steps"] = float(len(rows))
    return rows, episodes
