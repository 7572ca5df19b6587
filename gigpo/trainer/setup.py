"""Everything the training loop needs before its first iteration, built once from the config.

`set_up(config, resume)` returns a frozen `Run`: the model (after the supervised warm-up, if any), the
DeepSpeed engines (actor; reference for KL; critic for PPO), on every rank that plays (all of them with
an in-process generator, rank 0 with a remote server: gigpo.trainer.sharding) the env pools, prompt
builder, generator and sync verifier, and on rank 0 the metrics logger and rollout recorder;
`Run.close()` releases them. What the loop changes (its counters, the rollout pipeline) is the Run's `loop`.
The `build_*` helpers are also what `gigpo eval` and the benchmarks build their pieces with.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from gigpo.config import Config, dump_config

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from gigpo.envs.pool import EnvPool
    from gigpo.rollout.generator import Generator
    from gigpo.rollout.records import PromptFn
    from gigpo.rollout.weight_sync.verify import ProbeFollower, SyncVerifier
    from gigpo.trainer.engines import ActorEngine, CriticEngine, ReferenceModel
    from gigpo.trainer.lora import AdapterFreeReference
    from gigpo.trainer.memory_phases import MemoryPhases
    from gigpo.trainer.metrics import MetricsLogger
    from gigpo.trainer.pipeline import RolloutPipeline
    from gigpo.trainer.sharding import Share
    from gigpo.viewer.record_files import RolloutRecorder


def build_generator(config: Config, model_path: str):
    from gigpo.rollout.factory import generator_from_config

    return generator_from_config(config.rollout, model_path, config.model.dtype, config.trainer.seed)


def build_pool(config: Config, evaluation: bool = False):
    """The env pool for training episodes, or for evaluation ones (with `env.eval_kwargs` merged in)."""
    from gigpo.envs.pool import EnvPool

    e = config.env
    kwargs = {"invalid_action_penalty": e.invalid_action_penalty, **e.kwargs, **(e.eval_kwargs if evaluation else {})}
    return EnvPool(e.id, env_kwargs=kwargs, max_steps=e.max_steps, workers=config.env_workers_per_rank(),
                   step_timeout_s=e.step_timeout_s)


def build_prompt_fn(config: Config, tokenizer):
    """Episode views -> prompt token ids, batched through the tokenizer's chat template."""
    from gigpo.envs.prompt import PromptBuilder

    builder = PromptBuilder(tokenizer, config.env.max_steps, config.env.history_length, config.env.prompt_template,
                            system=config.env.system_prompt, chat_template=config.model.chat_template)
    return builder.batch_token_ids


def sampling(config: Config, evaluation: bool, seed: Optional[int], iteration: Optional[int] = None):
    """The rollout's sampling settings: training (rollout.temperature, top_p) or evaluation (eval_temperature).
    The generator returns log-probs only where they are read: never in evaluation, in training where the
    rollout trained on in `iteration` needs them (rollout_correction.generator_logprobs_needed; always when
    no iteration is given)."""
    from gigpo.rollout.types import SamplingSettings
    from gigpo.trainer.rollout_correction import generator_logprobs_needed

    r = config.rollout
    logprobs = not evaluation and (iteration is None or generator_logprobs_needed(config, iteration))
    return SamplingSettings(temperature=r.eval_temperature if evaluation else r.temperature,
                            top_p=1.0 if evaluation else r.top_p, max_new_tokens=r.max_new_tokens,
                            stop=tuple(r.stop), seed=seed, logprobs=logprobs)


def build_verifier(config: Config, generator, vocab_size: int, world_size: int):
    """The probe that checks every sync (rollout.verify_sync) on each rank that generates. Under ZeRO-3 with
    several ranks the probe's trainer forward is collective: every rank runs as many as the rank scoring the
    most replicas, and a rank without a generator runs them without checking (a ProbeFollower)."""
    from gigpo.rollout.weight_sync.verify import ProbeFollower, SyncVerifier, default_tolerance
    from gigpo.trainer.distributed import all_reduce_floats

    if not config.rollout.verify_sync:
        return None
    collective = config.trainer.zero_stage == 3 and world_size > 1
    replicas = generator.num_replicas if generator is not None else 0
    forwards = int(all_reduce_floats([replicas], op="max")[0]) if collective else None
    if generator is None:
        return ProbeFollower(vocab_size, forwards) if collective and forwards else None
    return SyncVerifier(generator, vocab_size, *default_tolerance(config.model.dtype), forwards=forwards)


@dataclass(eq=False)
class LoopState:
    """What changes while the loop runs, kept in one plainly mutable object so that `Run` itself is frozen.

    `counters` are what a checkpoint keeps of the loop (its `loop_state`): the last finished iteration and
    the env steps so far; the loop advances them in place. `pipeline` is the RolloutPipeline (rollout.mode),
    which the loop builds after the Run exists because its producer plays through the Run (`play(run, i)`).
    """

    counters: dict[str, Any]
    pipeline: Optional[RolloutPipeline] = None


@dataclass(frozen=True, eq=False)
class Run:
    """What the loop works with, built once by `set_up`; pools and generator on the ranks that play (`share`),
    the logger on rank 0. Frozen: what changes while the loop runs lives in `loop` (a LoopState)."""

    config: Config
    main: bool
    world_size: int
    run_dir: Path
    model_path: str
    tokenizer: PreTrainedTokenizerBase
    actor: ActorEngine
    reference: Optional[Union[ReferenceModel, AdapterFreeReference]]
    """The frozen policy of the KL term (None without KL); with LoRA, the actor with its adapters off."""
    critic: Optional[CriticEngine]
    """PPO's value model (None for the other estimators)."""
    pool: Optional[EnvPool]
    eval_pool: Optional[EnvPool]
    prompt_fn: Optional[PromptFn]
    generator: Optional[Generator]
    verifier: Optional[Union[SyncVerifier, ProbeFollower]]
    logger: Optional[MetricsLogger]
    """Rank 0's metrics log (None on the other ranks)."""
    recorder: RolloutRecorder
    """Rollout records for `gigpo view` (logging.rollouts_every; 0 writes none)."""
    share: Optional[Share]
    """This rank's place among the ranks that play (a sharding.Share); None on a rank that plays nothing."""
    from_generator: bool
    """Old log-probs come from the generator (old_logprobs_from_generator)."""
    memory_phases: MemoryPhases
    """What moves between generation and update on this rank (memory_phases.py); it tracks its own phase."""
    loop: LoopState

    @property
    def state(self) -> dict[str, Any]:
        """The loop's checkpointed counters (`loop.counters`): "iteration" (last finished), "env_steps_total"."""
        return self.loop.counters

    @property
    def pipeline(self) -> Optional[RolloutPipeline]:
        """The RolloutPipeline (rollout.mode), built by the loop on every rank (`loop.pipeline`)."""
        return self.loop.pipeline

    def close(self) -> None:
        from gigpo.trainer.distributed import shutdown_distributed

        if self.pipeline is not None:  # joins the async producer thread before what it uses closes
            self.pipeline.close()
        if self.generator is not None:
            self.generator.close()
        for env_pool in {id(p): p for p in (self.pool, self.eval_pool) if p is not None}.values():
            env_pool.close()
        if self.logger is not None:
            self.logger.close()
        shutdown_distributed()


def set_up(config: Config, resume: bool = False) -> Run:
    """Model, warm-up, engines, generator and logs; restores the latest checkpoint when `resume`."""
    import torch
    from transformers import AutoTokenizer

    from gigpo.infra.cpu_bf16 import cpu_bf16_notice
    from gigpo.infra.dtypes import cpu_has_fast_bf16
    from gigpo.models.resolve import check_model_path, resolve_model_path
    from gigpo.rollout.weight_sync import push_start, resume_weights
    from gigpo.trainer.batching import check_token_budget
    from gigpo.trainer.checkpoint import latest_checkpoint, load_checkpoint
    from gigpo.trainer.distributed import barrier, broadcast_object, init_distributed
    from gigpo.trainer import rollout_correction
    from gigpo.trainer.engines import ActorEngine, CriticEngine, ReferenceModel, settings_from_config
    from gigpo.trainer.lora import AdapterFreeReference
    from gigpo.trainer.memory_phases import MemoryPhases
    from gigpo.trainer.metrics import MetricsLogger
    from gigpo.trainer.sharding import playing_ranks
    from gigpo.trainer.sft_warm_start import sft_warm_start
    from gigpo.trainer.warmup_artifact import install_artifact
    from gigpo.viewer.record_files import RolloutRecorder

    t, a, e = config.trainer, config.algorithm, config.env
    # fail on a bad recipe before any model, process or environment is started
    check_token_budget(config.rollout.max_prompt_tokens, config.rollout.max_new_tokens, t.micro_token_budget)
    check_model_path(config.model.path)
    rank = init_distributed()
    main = rank.is_main
    share = playing_ranks(config.rollout.backend, rank.rank, rank.world_size, config.rollout.tensor_parallel_size)
    if main and rank.world_size > 1 and share.ranks == 1:
        print(f"gigpo: rank 0 alone plays the rollouts ({config.rollout.backend}); the other ranks join the update",
              flush=True)
    if main and (notice := cpu_bf16_notice(config.model.dtype, torch.cuda.is_available(), cpu_has_fast_bf16(),
                                           config.rollout.backend)):
        print(f"gigpo: {notice}", flush=True)
    run_dir = Path(t.run_dir)
    random.seed(t.seed)
    np.random.seed(t.seed)

    # ---- model, optional supervised warm-up (rank 0, before the engines exist)
    model_path = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed) if main else None
    model_path = broadcast_object(model_path)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None and main:
        print(f"gigpo: --resume found no checkpoint in {run_dir / 'checkpoints'}; starting from the beginning", flush=True)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(config))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pool = build_pool(config) if share else None  # each playing rank its own env workers
    eval_pool = (build_pool(config, evaluation=True) if e.eval_kwargs else pool) if share else None
    prompt_fn = build_prompt_fn(config, tokenizer) if share else None
    warm_dir = run_dir / "warmup"
    if t.sft_steps > 0 or t.sft_artifact:
        if main and not (warm_dir / "hf" / "config.json").is_file():
            if t.sft_artifact:  # the recipe's saved warm-up, checked against its digest
                install_artifact(t.sft_artifact, t.sft_artifact_sha256, warm_dir, model_path)
            else:
                sft_warm_start(config, model_path, pool, prompt_fn, tokenizer, warm_dir)
        barrier()
        model_path = str(warm_dir / "hf")

    # ---- engines: actor (trained), reference (frozen, for KL), critic (PPO only)
    engine_settings, loss_settings = settings_from_config(config)
    actor = ActorEngine(model_path, engine_settings, loss_settings)
    recorder = RolloutRecorder.from_config(config, run_dir)  # records for `gigpo view`
    reference = None
    if a.kl_coef > 0:  # with LoRA the reference is the actor with its adapters off: no second model
        reference = AdapterFreeReference(actor) if engine_settings.lora else ReferenceModel(model_path, engine_settings)
    critic = CriticEngine(model_path, *settings_from_config(config, critic=True)) if a.estimator == "ppo" else None
    counters: dict[str, Any] = {"iteration": 0, "env_steps_total": 0}
    if checkpoint is not None:
        restored = load_checkpoint(checkpoint, actor, critic)
        counters = {**counters, **restored.loop_state, "iteration": restored.iteration}

    # ---- generator (each playing rank its own, on its own device) and logs (rank 0)
    generator = build_generator(config, model_path) if share else None
    if share and share.replicas > 1:
        print(f"gigpo: rank {rank.rank} plays share {share.rank + 1} of {share.ranks} of every rollout and evaluation "
              f"as rank {share.replica + 1} of {share.replicas} of one tensor-parallel vLLM engine (vLLM executor "
              f"{generator.executor}) with its own env pool, and trains on every {share.replicas}th of its rows",
              flush=True)
    elif share and share.ranks > 1:
        print(f"gigpo: rank {rank.rank} plays share {share.rank + 1} of {share.ranks} of every rollout and evaluation "
              f"with its own {config.rollout.backend} generator"
              f"{f' (vLLM executor {generator.executor})' if hasattr(generator, 'executor') else ''} and env pool",
              flush=True)
    if config.rollout.server_urls:  # before the verifier: its probe asks the servers for this run's start
        push_start(actor, generator, counters["iteration"])
    verifier = build_verifier(config, generator, actor.hf_module().config.vocab_size, rank.world_size)
    logger = None
    if main:
        logger = MetricsLogger(run_dir, config.logging.wandb_mode, config.logging.wandb_project,
                               config.model_dump(mode="json"), run_dir.name)
        logger.truncate_after(counters["iteration"])
        print(f"gigpo: training {a.estimator} on {e.id} with {model_path}: iterations {counters['iteration'] + 1}.."
              f"{t.iterations}, {e.num_groups} groups x {e.group_size}, run dir {run_dir}", flush=True)
    if checkpoint is not None:
        resume_weights(actor, generator, counters["iteration"], verifier, started=bool(config.rollout.server_urls))
    return Run(config=config, main=main, world_size=rank.world_size, run_dir=run_dir, model_path=model_path,
               tokenizer=tokenizer, actor=actor, reference=reference, critic=critic, pool=pool, eval_pool=eval_pool,
               prompt_fn=prompt_fn, generator=generator, verifier=verifier, logger=logger, recorder=recorder,
               share=share, from_generator=rollout_correction.old_logprobs_from_generator(config),
               memory_phases=MemoryPhases.from_config(config, generator, reference), loop=LoopState(counters))
