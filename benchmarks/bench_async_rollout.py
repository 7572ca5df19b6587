"""Env steps/s of async turns against batched turns, on an env with injected tool-like step latency.

    PYTHONPATH=. python benchmarks/bench_async_rollout.py [--median-s 0.2 --p99-s 2.0] [--repeats 3] [overrides ...]

The env is any registered one (`--env`, default the recipe's) wrapped in gigpo/Latency-v0: each step
first sleeps a lognormal time with median 200 ms and 99th percentile 2 s (sigma = ln(p99/median)/2.326),
like a web or search tool. The model, prompts and sampling are `sokoban_tiny`'s (a tiny local model on the
in-process vLLM engine, or `--backend vllm-server`); overrides (`env.num_groups=4` ...) change the recipe. Both drivers play the same
groups in one process, alternating batched, async, batched, async, ..., and env steps/s is the steps
played over the wall time of the rollouts (pool and engine are started once, before the clock).

Env workers default to one per episode: a latency-bound env steps in parallel only across workers, and
both drivers get the same pool. `--median-s 0` runs the plain env (no latency), with the recipe's workers:
what async turns do on a CPU-bound env. The last line: `batched_env_steps_s=... async_env_steps_s=...
ratio=... loadavg=...` (the goal with latency: ratio >= 2). On 2 shared cores, the load average says how
busy the machine was.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from gigpo.config import load_config

RECIPE = "recipes/sokoban_tiny.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default=RECIPE)
    ap.add_argument("--env", default=None, help="registered env id to slow down (default: the recipe's env.id)")
    ap.add_argument("--median-s", type=float, default=0.2, help="median step latency; 0: no latency wrapper")
    ap.add_argument("--p99-s", type=float, default=2.0, help="99th percentile of the step latency")
    ap.add_argument("--repeats", type=int, default=3, help="rollouts per driver, alternated")
    ap.add_argument("--backend", default="vllm", choices=["vllm", "vllm-server"],
                    help="in-process engine, or one `gigpo serve` process the client starts")
    ap.add_argument("--workers", type=int, default=None, help="env workers (default: one per episode with latency)")
    ap.add_argument("overrides", nargs="*", help="recipe overrides, e.g. env.num_groups=4 env.group_size=4")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from gigpo.envs.pool import EnvPool
    from gigpo.envs.prompt import PromptBuilder
    from gigpo.models.resolve import resolve_model_path
    from gigpo.rollout.collect import rollout
    from gigpo.rollout.engine_settings import EngineSettings
    from gigpo.rollout.factory import make_generator
    from gigpo.rollout.types import SamplingSettings

    config = load_config(args.recipe, ["env.num_groups=8", "env.group_size=4", *args.overrides])
    e, r = config.env, config.rollout
    episodes = e.num_groups * e.group_size
    kwargs = {"invalid_action_penalty": e.invalid_action_penalty, **e.kwargs}
    if args.median_s > 0:
        env_id, kwargs = "gigpo/Latency-v0", {"env": args.env or e.id, "median_s": args.median_s, "p99_s": args.p99_s,
                                              **kwargs}
        workers = args.workers or episodes
    else:
        env_id, workers = args.env or e.id, args.workers or e.workers
    model_path = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed)
    prompt_fn = PromptBuilder(AutoTokenizer.from_pretrained(model_path), e.max_steps, e.history_length,
                              e.prompt_template, system=e.system_prompt).batch_token_ids
    engine = EngineSettings.from_config(r, config.model.dtype, config.trainer.seed).replace(enforce_eager=True)
    print(f"env {env_id} {kwargs}, {e.num_groups} groups x {e.group_size}, max_steps {e.max_steps}, "
          f"{workers} workers; model {model_path} on {args.backend} ({config.model.dtype}); loadavg {os.getloadavg()}", flush=True)
    generator = make_generator(args.backend, model_path, engine)
    rates: dict[str, list[float]] = {"batched": [], "async": []}
    try:
        with EnvPool(env_id, env_kwargs=kwargs, max_steps=e.max_steps, workers=workers,
                     step_timeout_s=e.step_timeout_s) as pool:
            settings = SamplingSettings(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                                        stop=tuple(r.stop), seed=config.trainer.seed)
            generator.generate(prompt_fn(pool.reset([0], 1)), settings)  # engine warm-up, off the clock
            for repeat in range(args.repeats):
                seeds = [e.train_seed_start + repeat * e.num_groups + g for g in range(e.num_groups)]
                for turns in ("batched", "async"):
                    t0 = time.perf_counter()
                    played = rollout(pool, generator, prompt_fn, seeds, e.group_size, settings, r.max_prompt_tokens,
                                     turns=turns)
                    seconds = time.perf_counter() - t0
                    rates[turns].append(len(played.steps) / seconds)
                    print(f"repeat {repeat} {turns:>7}: {len(played.steps)} env steps in {seconds:.2f} s = "
                          f"{rates[turns][-1]:.1f} steps/s (generate wait {played.seconds_generate:.2f} s, env wait "
                          f"{played.seconds_env:.2f} s); loadavg {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        generator.close()
    batched, asynchronous = statistics.median(rates["batched"]), statistics.median(rates["async"])
    ratios = [a / b for a, b in zip(rates["async"], rates["batched"])]
    print(f"per-repeat ratios {', '.join(f'{x:.2f}' for x in ratios)}")
    print(f"batched_env_steps_s={batched:.1f} async_env_steps_s={asynchronous:.1f} ratio={asynchronous / batched:.2f} "
          f"loadavg={'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
