"""Typed recipes: one pydantic model per section, loaded from YAML with inheritance and overrides.

A recipe is a YAML file whose top-level keys are the sections below. `base: other.yaml` (relative to
the recipe) is loaded first and the recipe's keys are merged over it. Command-line overrides
`section.key=value` are applied last; values are parsed as YAML scalars (`1e-6`, `true`, `[1, 2]`).

Every default lives here, once. Unknown keys and wrong types are errors that name the key.
"""
from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any, Iterator, Literal, Optional, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from gigpo.infra.cores import share_of_cores


class RecipeError(ValueError):
    """A recipe or override that cannot be turned into a valid config; the message says what to fix."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


FIXED_ON_RESUME: dict[str, Any] = {"fixed_on_resume": True}
"""Marks a field (json_schema_extra) that defines the experiment: `--resume` refuses a change to it, since the
checkpoint's weights or its first iterations would then belong to another run (gigpo.trainer.resume_config)."""


class LoraConfig(Section):
    """LoRA adapters (peft) on the policy, and on PPO's critic: only they (and the critic's value
    head) are trained; the base weights stay frozen, and the KL reference is the same model with its
    adapters switched off, so no second copy is loaded."""

    enabled: bool = Field(False, json_schema_extra=FIXED_ON_RESUME)
    rank: int = Field(16, ge=1, json_schema_extra=FIXED_ON_RESUME)
    """r: rank of each adapter's B @ A."""
    alpha: float = Field(32.0, gt=0, json_schema_extra=FIXED_ON_RESUME)
    """The adapter's update is scaled by alpha / rank."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapters' input while training (off while scoring log-probs)."""
    target_modules: list[str] = Field(default_factory=lambda: ["all-linear"], json_schema_extra=FIXED_ON_RESUME)
    """Module names (or name suffixes) to adapt; ["all-linear"]: every linear layer but the output head."""

    @field_validator("target_modules")
    @classmethod
    def _named_modules(cls, names: list[str]) -> list[str]:
        if not names or any(not str(n).strip() for n in names):
            raise ValueError(f"model.lora.target_modules={names!r} must list module names such as q_proj, "
                             "v_proj, or be [all-linear]")
        if "all-linear" in names and len(names) > 1:
            raise ValueError(f"model.lora.target_modules={names!r}: all-linear already covers every linear layer; "
                             "give either [all-linear] or a list of module names")
        embeddings = sorted({"embed_tokens", "lm_head"} & set(names))
        if embeddings:
            raise ValueError(f"model.lora.target_modules names {', '.join(embeddings)}: adapters on the embedding "
                             "or output head are not supported (tied embeddings could not be merged for the "
                             "generator); target linear layers only")
        return names


class ModelConfig(Section):
    """Which policy to train: a Hugging Face id/directory, or a small model built locally."""

    path: Optional[str] = Field(None, json_schema_extra=FIXED_ON_RESUME)
    """Hugging Face model id or local directory (loaded with from_pretrained, unchanged code path)."""
    init: Optional[str] = Field(None, json_schema_extra=FIXED_ON_RESUME)
    """Build a model locally from a preset (tiny, small, base05b); cached by config hash."""
    corpus: Optional[str] = Field(None, json_schema_extra=FIXED_ON_RESUME)
    """Text file to train the local tokenizer on (with `init`); default: built-in environment texts."""
    dtype: Literal["bf16", "fp32"] = "bf16"
    """Weights and compute. A CPU without AVX-512 emulates bf16 (about 100x slower than fp32; `gigpo train`
    warns): use fp32 there."""
    gradient_checkpointing: bool = False
    seed: int = 0
    """Seed for the weights of a locally built model."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    chat_template: Optional[str] = None
    """None: the tokenizer's own. A name (chatml, llama3, mistral, gemma, ...) or a Jinja file: that template
    instead. `none`: plain-text prompts for a base model (needs rollout.stop). See gigpo.models.chat_template."""

    @model_validator(mode="after")
    def _one_source(self) -> "ModelConfig":
        from gigpo.models.chat_template import check_model_template

        if self.path and self.init:
            raise ValueError("set either model.path or model.init, not both")
        check_model_template(self.path, self.chat_template)
        return self


class RolloutConfig(Section):
    """How actions are generated: backend, sampling, and weight sync."""

    backend: Literal["hf", "vllm", "vllm-server"] = "vllm"
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(512, gt=0)
    max_prompt_tokens: int = Field(2048, gt=0)
    eval_temperature: float = Field(0.4, ge=0.0)
    stop: list[str] = Field(default_factory=lambda: ["</action>"])
    """Strings that end a response (kept in it). The default ends generation at the built-in envs' closing
    action tag, so no tokens are spent after the action; set [] for an env whose answers end otherwise."""
    logp_gap_every: int = Field(1, ge=0)
    """Iterations between measurements of `rollout/logp_gap_*`, the generator-trainer log-prob gap (iterations
    1, 1 + k, 1 + 2k, ...); 0: never. It needs the generator's log-probs of every sampled token, which vLLM
    pays for with a full-vocabulary log-softmax and a Python object per token: on the other iterations
    generation asks for none, unless the rollout correction (algorithm.rollout_correction) or
    trainer.old_logprobs=generator reads them (then every iteration does, and the gap is measured too)."""
    verify_sync: bool | Literal["auto"] = "auto"
    """After every weight sync, compare generator and trainer log-probs on a probe sequence; a gap over the
    bound stops training (gigpo/rollout/weight_sync/verify.py). auto: on with the vllm backends in rollout.mode=sync (a
    reloaded engine, CUDA graphs included, is checked), off with hf (the generator loads the actor's own
    tensors) and in async mode (the actor trains on while the generator loads). Resolved to true/false on load."""
    weight_sync: Literal["auto", "shm", "nccl", "inprocess"] = "auto"
    """How weights reach vLLM: a safetensors file in /dev/shm (one machine), a broadcast from the trainer
    into the engine's workers (NCCL to other GPUs or hosts, gloo on CPUs or a shared GPU), or inprocess
    (backend vllm only: the engine core runs in the trainer's process and loads the gathered tensors by
    reference, on their device). auto, resolved on load (`auto_weight_sync`): inprocess for backend vllm on
    several ranks (each rank's engine already runs in its process there, vLLM's external launcher) and on one
    CUDA rank in rollout.mode=sync (the weights stay on the GPU), else shm (one CPU rank keeps vLLM's thread
    binding out of the trainer's process; async mode syncs host copies anyway; docs/generation.md)."""
    server_urls: list[str] = Field(default_factory=list)
    """vllm-server: connect to these servers instead of starting our own."""
    num_servers: int = Field(1, ge=1)
    """vllm-server: how many servers to start and supervise on this machine."""
    kv_cache_gb: float = Field(1.0, gt=0)
    """vLLM on CPU: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE). hf: the most GiB of prompt KV kept across
    the turns of a rollout (with enable_prefix_caching)."""
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1.0)
    enable_prefix_caching: bool = True
    """vLLM's prefix cache; hf: keep prompts' KV across the turns of a rollout (emptied when it ends or the
    weights change)."""
    max_num_seqs: int = Field(256, gt=0)
    enforce_eager: bool = False
    """vLLM: skip torch.compile and CUDA graphs, so the engine starts sooner (the CPU tests use it). Off by
    default: on a GPU vLLM captures CUDA graphs, and every sync into them is checked by verify_sync; its
    effect on generation speed was not measured here."""
    sleep_level: Literal[0, 1, 2] = 1
    """vLLM in process on CUDA, rollout.mode=sync: the engine sleeps while the trainer computes log-probs and
    updates (vLLM's sleep mode). 1: its weights go to host RAM and its KV cache is dropped; 2: both are
    dropped (the sync reloads the weights; less host RAM); 0: it never sleeps. No effect on CPU (logged once),
    with hf or vllm-server, or in async mode (the engine generates during the update)."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vllm: ranks that share one engine (vLLM's external-launcher mode); rollout data parallelism is then
    trainer.nprocs / tensor_parallel_size engines. Needs several GPUs: not run yet (docs/gpu.md)."""
    request_timeout_s: float = Field(300.0, gt=0)
    """vllm-server: longest a generate request may take before the server counts as stuck."""
    turns: Literal["auto", "batched", "async"] = "auto"
    """How episodes move within a rollout. batched: one generate call per turn, every episode waits for the
    turn's slowest generation and env step. async: each episode is prompted as soon as its own env step ends
    and stepped as soon as its own answer is ready (vllm, vllm-server only). auto: batched for hf, the
    measured faster one for the vLLM backends (docs/generation.md)."""

    mode: Literal["sync", "async"] = "sync"
    """Across iterations. sync: play an iteration's rollout, then update on it. async: the next iterations'
    rollouts play on a thread of their own (with the weights synced last) while this one's update runs;
    samples then lag the trainer by up to `max_staleness` versions and the loss corrects them with truncated
    importance weights (docs/config.md, "Asynchronous rollout")."""
    max_staleness: int = 1
    """async: the most policy versions a sample may lag the trainer when it is trained on (trainer version
    at the update minus the version that sampled it). A rollout that would lag more is not started until
    the weights it needs are synced: the producer blocks, nothing is dropped."""
    importance_cap: float = Field(2.0, ge=1.0)
    """C, the cap of the rollout correction's token weights min(exp(logp_old - logp_behaviour), C)
    (algorithm.rollout_correction; async mode's default). Why 2: PPO moves a token's probability by a few
    tens of percent per update, so between policies one or two versions apart nearly every weight lies well
    inside [0.5, 2] and passes unchanged; C bounds the variance of the rare token the trainer finds much
    likelier than the generator did. C = 1 (V-trace's rho-bar) would also cut every up-weight of an ordinary
    token; much larger caps let one token dominate a mini-batch. `correction/truncated_share` says whether
    the cap binds."""
    group_versions: Literal["separate", "mixed"] = "separate"
    """async: separate: weights reach the generator only between rollouts and GiGPO's step groups split by
    policy version, so no episode or step group mixes versions. mixed: weights also land between the turns
    of a rollout in flight (batched turns), so groups mix versions, corrected by the importance weights."""

    @field_validator("max_staleness")
    @classmethod
    def _positive_staleness(cls, k: int) -> int:
        if k < 1:
            raise ValueError(f"rollout.max_staleness={k} must be at least 1: it counts the policy versions a sample "
                             "may lag the trainer in rollout.mode=async (1: the next rollout overlaps this update)")
        return k

    @model_validator(mode="before")
    @classmethod
    def _resolve_weight_sync(cls, data: Any) -> Any:
        """auto alone (no trainer section to say how many ranks): shm. `Config` resolves it first."""
        if isinstance(data, dict) and data.get("weight_sync", "auto") == "auto":
            data = {**data, "weight_sync": "shm"}
        return data

    @model_validator(mode="before")
    @classmethod
    def _resolve_verify_sync(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("verify_sync", "auto") == "auto":
            auto = data.get("backend", "vllm") != "hf" and data.get("mode", "sync") == "sync"
            data = {**data, "verify_sync": auto}
        return data

    @model_validator(mode="after")
    def _async_mode_settings(self) -> "RolloutConfig":
        if self.weight_sync == "inprocess" and self.backend != "vllm":
            raise ValueError(f"rollout.weight_sync=inprocess loads weights into an engine in the trainer's process, "
                             f"but rollout.backend={self.backend}: use rollout.backend=vllm, or weight_sync=shm or nccl")
        if self.tensor_parallel_size > 1 and self.backend != "vllm":
            raise ValueError(f"rollout.tensor_parallel_size={self.tensor_parallel_size} shards the in-process vLLM engine "
                             f"over ranks, but rollout.backend={self.backend}: use rollout.backend=vllm, or "
                             "rollout.tensor_parallel_size=1")
        if self.tensor_parallel_size > 1 and self.turns == "async":
            raise ValueError(f"rollout.turns=async with rollout.tensor_parallel_size={self.tensor_parallel_size}: the "
                             "ranks of one engine must send it the same requests in the same order, which turns that "
                             "follow each env step's timing do not; use rollout.turns=batched (auto picks it)")
        if self.mode == "async" and self.verify_sync:
            raise ValueError("rollout.verify_sync=true compares the generator with the actor right after a sync, but in "
                             "rollout.mode=async the actor trains on while the generator takes the weights: use "
                             "rollout.mode=sync to verify syncs, or set rollout.verify_sync=false")
        return self

    @model_validator(mode="after")
    def _async_turns_need_vllm(self) -> "RolloutConfig":
        if self.turns == "async" and self.backend == "hf":
            raise ValueError("rollout.turns=async needs a vLLM backend (rollout.backend=vllm or vllm-server); "
                             "the hf backend generates whole turns: use rollout.turns=batched or auto")
        return self


class EnvConfig(Section):
    """Which environment, how many tasks and group members, and how episodes run."""

    id: str = Field("gigpo/Sokoban-v0", json_schema_extra=FIXED_ON_RESUME)
    """Gymnasium id of an agent environment: a built-in one, "module:Id" for one that your module registers
    (imported first, as gymnasium.make does), or one an installed package declares (docs/envs.md)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    num_groups: int = Field(16, ge=1)
    """B: tasks per iteration."""
    group_size: int = Field(8, ge=1)
    """N: trajectories per task, all reset from the same seed."""
    max_steps: int = Field(50, ge=1)
    history_length: int = Field(2, ge=0)
    """K: how many past (observation, action) pairs the prompt shows."""
    invalid_action_penalty: float = 0.1
    workers: Optional[int] = Field(None, ge=1)
    """Env worker processes per rank; default: this machine's usable cores split over its ranks (trainer.nprocs)."""
    step_timeout_s: float = Field(60.0, gt=0)
    train_seed_start: int = 0
    eval_seed_start: int = 1_000_000_000
    """Evaluation seeds start here: disjoint from training seeds by construction."""
    eval_episodes: int = Field(128, ge=1)
    eval_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Merged over `kwargs` for evaluation episodes (e.g. ALFWorld's `split: valid_unseen`)."""
    prompt_template: Optional[str] = None
    """Override the environment's prompt template (Python format string; see docs/envs.md)."""
    system_prompt: Optional[str] = None
    """A system message before every prompt; None keeps the chat template's own default (SmolLM2's
    template adds one, Qwen's does not). Templates without a system role get it atop the user message."""

    @field_validator("id")
    @classmethod
    def _registered_env(cls, env_id: str) -> str:
        from gigpo.envs.registry import check_env_id

        return check_env_id(env_id)

    @model_validator(mode="after")
    def _known_kwargs(self) -> "EnvConfig":
        from gigpo.envs.registry import check_env_kwargs

        check_env_kwargs(self.id, self.kwargs, "env.kwargs")
        check_env_kwargs(self.id, {**self.kwargs, **self.eval_kwargs}, "env.eval_kwargs")
        return self


class AlgorithmConfig(Section):
    """Advantage estimator and PPO-clip loss."""

    estimator: str = Field("gigpo", json_schema_extra=FIXED_ON_RESUME)
    gamma: float = Field(0.95, ge=0.0, le=1.0)
    lam: float = Field(0.95, ge=0.0, le=1.0)
    step_weight: float = 1.0
    norm: Literal["std", "mean"] = "std"
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    similarity: Optional[float] = Field(None, gt=0.0, le=1.0)
    """Similarity threshold for anchor grouping; None groups by exact anchor."""
    step_min_spread: float = Field(0.0, ge=0.0)
    """GiGPO: step groups whose discounted returns span no more than this get no step advantage (a
    remedy for std normalisation blowing up step-penalty-only differences; 0 keeps every group)."""
    hgpo_history: int = Field(2, ge=0)
    """estimator=hgpo: K, the earlier steps in the longest history key (nested groups of 1..K+1 states;
    the reference recipe: 2 or 4). gigpo/advantage/hgpo.py."""
    hgpo_alpha: float = 1.0
    """estimator=hgpo: a group keyed by L - 1 states weighs L**alpha in a step's mean (0: all alike)."""
    hgpo_episode_group: bool = False
    """estimator=hgpo: average the episode-level advantage in as one more group (weight 1)."""
    graph_gamma: float = Field(0.1, ge=0.0, le=1.0)
    """estimator=graphgpo: a step's return is 10 * graph_gamma**d, d its next state's graph distance to the goal
    (the reference: 0.1 on ALFWorld, 0.2 on WebShop). gigpo/advantage/graphgpo.py."""
    graph_episode_weight: float = 1.0
    """estimator=graphgpo: advantage = step_weight * graph step part + this * episode part."""
    graph_distance: Literal["absolute", "delta"] = "absolute"
    """estimator=graphgpo: exponent d(next state), or d(next) - d(state) + 1 (the step's progress)."""
    graph_goal_return: float = 0.0
    """estimator=graphgpo: a trajectory reached the goal when its return exceeds this (the reference: > 0;
    raise it where a failed episode can end above 0, e.g. WebShop's partial scores)."""
    shuffle_advantages: bool = False
    """A placebo control for experiments: permute the advantages across the iteration's rows before the
    update (seeded by trainer.seed and the iteration). The update keeps its size and noise and loses its
    signal, so a run that falls as fast as with real advantages shows the fall is update noise."""
    dynamic_sampling: bool = False
    max_resample: int = Field(3, ge=0)
    clip_low: float = Field(0.2, ge=0.0)
    clip_high: float = Field(0.2, ge=0.0)
    kl_coef: float = Field(0.01, ge=0.0)
    entropy_coef: float = Field(0.001)
    loss_agg: Literal["token-mean", "seq-mean"] = "token-mean"
    rollout_correction: str = "auto"
    """Correct for the generator (vLLM, or a stale policy in async mode) not being the trainer
    (gigpo/trainer/rollout_correction.py). token: truncated importance weights min(exp(logp_old -
    logp_behaviour), rollout.importance_cap) on each token's loss. seq-mask / geo-mask: leave out steps whose
    ratio exp(sum of the token log-ratios), or its geometric mean over tokens, lies outside
    [correction_mask_low, correction_mask_high]. none: no correction. auto: token in rollout.mode=async
    (decoupled PPO, as before this setting), none in sync (today's behaviour; no learning comparison has
    been run yet). With any correction on, `correction/*` logs the mismatch every iteration, and
    trainer.old_logprobs=generator skips the old-log-prob recompute in sync mode (the ratio against the
    generator's log-probs is then capped and masked instead; docs/config.md, "Rollout correction")."""
    correction_mask_low: float = Field(0.5, gt=0.0, le=1.0)
    """seq-mask / geo-mask: the lowest ratio (or geometric mean) a step may have and still be trained on."""
    correction_mask_high: float = Field(2.0, ge=1.0)
    """seq-mask / geo-mask: the highest ratio (or geometric mean). The defaults suit the sequence ratio;
    the geometric mean of a per-token mismatch is far tighter (verl uses [0.999, 1.001] for it)."""

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, name: str) -> str:
        from gigpo.advantage.estimators import ESTIMATORS

        if name not in ESTIMATORS:
            raise ValueError(f"algorithm.estimator={name!r} is unknown; valid: {', '.join(sorted(ESTIMATORS))}")
        return name

    @field_validator("rollout_correction")
    @classmethod
    def _known_correction(cls, mode: str) -> str:
        from gigpo.trainer.rollout_correction import CORRECTION_MODES

        if mode not in CORRECTION_MODES:
            raise ValueError(f"algorithm.rollout_correction={mode!r} is unknown; valid: {', '.join(CORRECTION_MODES)}")
        return mode
    value_clip: Optional[float] = Field(0.2, gt=0.0)
    """PPO critic: clip new values to values_old +- this in the value loss; None for a plain squared error."""


class TrainerConfig(Section):
    """Optimisation, parallelism, checkpoints."""

    @model_validator(mode="before")
    @classmethod
    def _one_mini_batch_rule(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mini_batch_size") is not None:
            if data.get("mini_batches") is not None:
                raise ValueError(f"trainer.mini_batches={data['mini_batches']} and trainer.mini_batch_size="
                                 f"{data['mini_batch_size']} both cut mini-batches: set one of them (the other to null)")
            data = {**data, "mini_batches": None}
        return data

    @model_validator(mode="after")
    def _some_mini_batch_rule(self) -> "TrainerConfig":
        if self.mini_batches is None and self.mini_batch_size is None:
            raise ValueError("trainer.mini_batches and trainer.mini_batch_size are both null: set one "
                             "(mini_batches: 4 cuts every epoch into 4 optimizer steps)")
        return self

    @model_validator(mode="after")
    def _artifact_has_its_digest(self) -> "TrainerConfig":
        import re

        if (self.sft_artifact is None) != (self.sft_artifact_sha256 is None):
            raise ValueError("trainer.sft_artifact and trainer.sft_artifact_sha256 go together: the artifact's folder "
                             "and the 64-hex-digit sha256 that `gigpo warmup` printed (and wrote to its SHA256 file)")
        if self.sft_artifact_sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", self.sft_artifact_sha256):
            raise ValueError(f"trainer.sft_artifact_sha256={self.sft_artifact_sha256!r} is not a sha256 (64 hex "
                             "digits): copy it from the artifact's SHA256 file")
        return self

    iterations: int = Field(150, ge=1)
    lr: float = Field(1e-6, gt=0)
    critic_lr: float = Field(1e-5, gt=0)
    warmup_steps: int = Field(20, ge=0)
    """Optimizer steps of linear learning-rate warm-up at the start of RL. A fresh Adam's first steps move every
    weight by about the learning rate whatever the gradient, which knocked warm-started, sharp policies down
    (issue 38: Hanoi from 100% to 37.5% sampled success). 20 kept them; measured not worse on `make train` and
    E6 (3 paired seeds each, docs/results.md). 0 turns it off."""
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    ppo_epochs: int = Field(1, ge=1)
    mini_batches: Optional[int] = Field(4, ge=1)
    """Optimizer steps per PPO epoch: the iteration's step rows are cut into this many mini-batches of
    (nearly) equal size, however many steps the episodes took. One number to reason about: an iteration
    takes `mini_batches x ppo_epochs` optimizer steps. None: cut by `mini_batch_size` instead."""
    mini_batch_size: Optional[int] = Field(None, ge=1)
    """Step rows per optimizer step (the paper's 256), instead of `mini_batches`: long episodes then take
    more optimizer steps per iteration. Setting it switches `mini_batches` off unless both are given."""
    micro_token_budget: int = Field(16384, ge=1)
    """Tokens per micro-batch (dynamic batch size), padding included: samples are grouped up to this many."""
    layout: Literal["auto", "packed", "padded", "shared"] = "auto"
    """Micro-batch layout: packed (concatenated, no padding; pays with flash-attention), padded (sorted by
    length, left-padded), shared (samples with identical prompts share one row: the prompt is computed
    once; needs SDPA/eager), auto (packed with flash-attention, else shared)."""
    old_logprobs: Literal["auto", "generator", "trainer"] = "auto"
    """Where the PPO ratio's old log-probs come from: `trainer` recomputes them with the actor (one more
    forward per sample); `generator` takes the ones the generator returned while sampling, exact when it
    holds the actor's weights in the training dtype and samples at temperature 1; `auto` is `generator`
    exactly then (hf backend, fp32, temperature 1) and `trainer` otherwise, logging the generator-trainer
    gap (`rollout/logp_gap_*`) so a backend mismatch shows."""
    minibatch_by_prompt: bool = False
    """Cut mini-batches from a shuffle of same-prompt sets rather than of single samples, so the shared
    layout pays each prompt's forward once per mini-batch (faster updates on Sokoban). Off by default:
    it puts all rows of one state into one optimizer step, so each step sees few distinct states
    (docs/results.md, E2). Without effect when one mini-batch holds the whole iteration."""
    zero_stage: int = Field(2, ge=0, le=3)
    nprocs: int = Field(1, ge=1)
    offload_reference: bool = False
    """On CUDA: keep the KL reference in host RAM while the generator runs, and on the GPU only for the
    log-probs and update phase (frees its weights for vLLM's KV cache). ZeRO 0-2 only (under ZeRO-3 each
    rank holds 1/nprocs of it). No effect on CPU."""
    seed: int = Field(0, json_schema_extra=FIXED_ON_RESUME)
    run_dir: str = "runs/default"
    save_every: int = Field(10, ge=1)
    keep_last: int = Field(2, ge=1)
    eval_every: int = Field(10, ge=1)
    max_env_steps: Optional[int] = Field(None, ge=1)
    """Stop once this many environment steps were trained on (a budget for comparisons)."""
    sft_steps: int = Field(0, ge=0)
    """Supervised warm-up steps on expert demonstrations before RL (environments with an expert)."""
    sft_lr: float = Field(1e-3, gt=0)
    sft_batch_size: int = Field(128, ge=1)
    sft_rooms: int = Field(3000, ge=1)
    """Tasks whose states the warm-up demonstrations come from."""
    sft_expert_share: float = Field(0.7, ge=0.0, le=1.0)
    """Share of expert moves in the policy that visits demonstration states (the rest are random)."""
    sft_action_share: Optional[float] = Field(None, ge=0.0, le=1.0)
    """Share of each answer's warm-up loss carried by the action's own tokens (the text inside <action> tags),
    the rest by the format tokens; None: every answer token weighs the same. With 7 format tokens to 1 move,
    the plain token mean learns the move ~2x more slowly (issue 24, E4)."""
    sft_micro_tokens: Optional[int] = Field(16384, ge=1)
    """A warm-up batch whose padded size (rows x longest row) exceeds this many tokens runs as micro-batches of
    rows of similar length (gradient accumulation, the LM head only on answer positions): same gradient up
    to float summation order, far less padding and attention on long prompts (ALFWorld). None: never split."""
    sft_lora_rank: int = Field(0, ge=0)
    """0: the warm-up trains every weight. r > 0: it trains rank-r LoRA adapters (alpha 2r, every linear layer but
    a tied head) and merges them into the base, and `gigpo warmup` saves only the adapters: a few MB that can be
    committed (SmolLM2-135M at rank 8: about 10 MB in fp32), installed over the same base on any machine."""
    sft_seed: Optional[int] = None
    """Seed of the warm-up (its demonstration tasks, exploration and SGD order); None: trainer.seed. Set it to
    give every RL seed the same warm-up checkpoint (`gigpo compare --shared-warmup`), so seeds differ only in RL."""
    sft_artifact: Optional[str] = None
    """A saved warm-up (a Hugging Face model folder from `gigpo warmup`) that RL starts from instead of building the
    warm-up: the same weights on every machine (docs/trainer.md, "A warm-up as an artifact"). The sft_* settings
    then say how it was made. Relative paths are read from the directory gigpo runs in."""
    sft_artifact_sha256: Optional[str] = None
    """The artifact's digest (its SHA256 file): a run whose artifact differs stops before any engine starts."""


class LoggingConfig(Section):
    """Where metrics go."""

    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_project: str = "gigpo"
    log_rollouts: bool = False
    """Also write every iteration's step rows (the `gigpo advantage` input format) to rollouts/ in the run directory."""
    rollouts_every: int = Field(10, ge=0)
    """Write a rollout record for `gigpo view` to records/ every this many iterations (and the last), and one
    of every evaluation; 0 writes none."""
    rollouts_max_mb: float = Field(8.0, gt=0)
    """Bound on one record's JSON before gzip: whole groups are kept while they fit, the rest are counted."""
    rollouts_max_chars: int = Field(1000, ge=20)
    """Observation and response texts longer than this are cut in records (the middle is dropped)."""
    progress: bool = True
    """Progress of long phases: tqdm bars on a terminal; in a log file plain lines, no carriage returns
    (gigpo/infra/progress.py). false: no bars (the warm-up still prints a line every tenth)."""


class Config(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    def env_workers_per_rank(self) -> int:
        """env.workers, or this machine's usable cores split over its ranks: the one rule that each rank's env pool
        starts with and `gigpo plan` budgets memory for."""
        return self.env.workers or share_of_cores(self.trainer.nprocs)

    @model_validator(mode="before")
    @classmethod
    def _resolve_weight_sync(cls, data: Any) -> Any:
        """rollout.weight_sync=auto, resolved by `auto_weight_sync` (on this machine's device)."""
        if not isinstance(data, dict):
            return data
        rollout, trainer = data.get("rollout") or {}, data.get("trainer") or {}
        if not isinstance(rollout, dict) or not isinstance(trainer, dict) or rollout.get("weight_sync", "auto") != "auto":
            return data
        nprocs = trainer.get("nprocs", 1)
        backend = rollout.get("backend", RolloutConfig.model_fields["backend"].default)
        mode = rollout.get("mode", RolloutConfig.model_fields["mode"].default)
        if not isinstance(nprocs, int) or backend != "vllm":
            return data  # RolloutConfig's own default (shm), or a type error the fields report
        # the device matters only for one vLLM rank in sync mode: torch is imported only then
        device = training_device() if nprocs == 1 and mode == "sync" else "cpu"
        return {**data, "rollout": {**rollout, "weight_sync": auto_weight_sync(backend, nprocs, mode, device)}}

    @model_validator(mode="after")
    def _model_source(self) -> "Config":
        if not self.model.path and not self.model.init:
            raise ValueError("the recipe names no model: set model.path (HF id or directory) or model.init (a preset)")
        if (self.model.chat_template or "").strip().lower() == "none" and not self.rollout.stop:
            raise ValueError("model.chat_template=none (plain-text prompts for a base model) needs rollout.stop: a "
                             "base model rarely ends its answer with EOS, so set e.g. rollout.stop=['</action>'] "
                             "(kept in the output, so the action still parses)")
        tp, ranks = self.rollout.tensor_parallel_size, self.trainer.nprocs
        if ranks % tp:
            raise ValueError(f"rollout.tensor_parallel_size={tp} must divide trainer.nprocs={ranks}: each engine spans "
                             f"{tp} ranks and rollout data parallelism is nprocs / tensor_parallel_size; set "
                             f"trainer.nprocs to a multiple of {tp} or rollout.tensor_parallel_size to a divisor of {ranks}")
        if self.rollout.backend == "vllm" and ranks > 1 and self.rollout.weight_sync == "nccl":
            raise ValueError(f"rollout.weight_sync=nccl with rollout.backend=vllm and trainer.nprocs={ranks}: on several "
                             "ranks each rank's engine runs in the rank's own process (vLLM's external launcher), so there is "
                             "no engine process to broadcast to; use rollout.weight_sync=inprocess (on the device) or "
                             "shm, or rollout.backend=vllm-server for engines on other GPUs")
        if self.trainer.offload_reference and self.trainer.zero_stage == 3:
            raise ValueError("trainer.offload_reference=true needs trainer.zero_stage 0-2: under ZeRO-3 the reference "
                             "is partitioned (1/nprocs per rank); set trainer.offload_reference=false")
        if self.trainer.old_logprobs == "generator" and self.rollout.mode == "async":
            raise ValueError("trainer.old_logprobs=generator cannot be used with rollout.mode=async: the generator's "
                             "log-probs are those of a stale policy (the behaviour one), and the PPO ratio needs the "
                             "trainer's own; use trainer.old_logprobs=auto or trainer")
        if self.trainer.old_logprobs == "generator" and self.rollout.temperature != 1.0:
            raise ValueError(f"trainer.old_logprobs=generator needs rollout.temperature=1 (got {self.rollout.temperature}): "
                             "generators return log-probs of the untempered distribution; use trainer or auto")
        return self


# --------------------------------------------------------------------------- loading

def auto_weight_sync(backend: str, nprocs: int, mode: str, device: str) -> str:
    """What rollout.weight_sync=auto means for `backend` with `nprocs` trainer ranks in rollout.mode `mode`, the
    trainer on `device` ("cuda" or "cpu"): inprocess (the trainer's tensors into a vLLM engine in its
    process, by reference, on the device) where every rank runs its own vLLM engine in process (nprocs > 1,
    vLLM's external launcher), and on CUDA at one rank in sync mode; else shm (a file in /dev/shm).

    shm stays the choice on CPU at one rank (vLLM's CPU worker would bind the trainer's OpenMP threads) and in
    async mode (the sync takes host copies there anyway, and an engine in this process would share the
    trainer's GIL while it generates); docs/generation.md."""
    if backend != "vllm":
        return "shm"
    if nprocs > 1 or (device == "cuda" and mode == "sync"):
        return "inprocess"
    return "shm"


def training_device() -> str:
    """"cuda" where the trainer will train on GPUs (CUDA visible and DeepSpeed's accelerator not forced to the
    CPU, as gigpo.trainer.distributed.configure_accelerator decides), else "cpu". Imports torch."""
    import os

    if os.environ.get("DS_ACCELERATOR", "cuda") == "cpu":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} must be a mapping of sections, got {type(data).__name__}")
    return data


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "kwargs":
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _load_with_bases(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise RecipeError(f"recipe inheritance loops: {' -> '.join(str(p) for p in seen + (path,))}")
    data = _read_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    return _deep_merge(_load_with_bases(path.parent / base, seen + (path,)), data)


def _fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every field of a config section and its subsections, by dotted name, sections before their fields."""
    for name, field in model.model_fields.items():
        yield prefix + name, field
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _fields(ann, prefix + name + ".")


def _valid_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    return [name for name, _ in _fields(model, prefix)]


def fixed_on_resume_keys() -> tuple[str, ...]:
    """The dotted names of the fields marked FIXED_ON_RESUME: marked where they are declared, so a new setting that
    defines the experiment is marked beside its siblings rather than in a list elsewhere."""
    return tuple(name for name, field in _fields(Config)
                 if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("fixed_on_resume"))


def _takes_text(parts: list[str]) -> bool:
    """Whether the field that `parts` names holds text (str or Optional[str]): its value on the command line is
    taken as written, not read as YAML, so that a folder named `2024` or `0755` stays that name rather than
    becoming a number (or, with a leading zero, an octal one)."""
    model: Any = Config
    for part in parts:
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return False
        model = field.annotation
    return model is str or set(get_args(model)) == {str, type(None)}


def _apply_override(data: dict[str, Any], override: str) -> None:
    if "=" not in override:
        raise RecipeError(f"override {override!r} must look like section.key=value")
    dotted, raw = override.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) < 2 or not all(parts):
        raise RecipeError(f"override {override!r} must name a section and a key, e.g. trainer.lr=1e-6")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _takes_text(parts):
        value = raw.strip()
    if (parts[0] == "model" and len(parts) == 2 and parts[1] in ("path", "init") and value is not None
            and isinstance(data.get("model"), dict)):
        # a model source given on the command line replaces the recipe's, whichever kind it was (clearing one
        # with `model.init=null` leaves the other alone)
        data["model"].pop("init" if parts[1] == "path" else "path", None)
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RecipeError(f"override {override!r}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def _describe(error: dict[str, Any], data: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in error["loc"] if not str(p).startswith("function-"))
    kind = error["type"]
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(loc, _valid_keys(Config), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown key {loc}{hint}"
    if kind == "value_error" or not loc:
        return str(error["msg"]).removeprefix("Value error, ")
    expected = error["msg"]
    return f"{loc}={error.get('input')!r} is invalid: {expected}"


def build_config(data: dict[str, Any], source: str = "<recipe>") -> Config:
    """Validate a merged recipe mapping; raise RecipeError naming every bad key."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = "\n  ".join(_describe(e, data) for e in exc.errors())
        raise RecipeError(f"invalid recipe {source}:\n  {problems}") from None


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load a recipe with its bases, apply `section.key=value` overrides, and validate."""
    data = _load_with_bases(Path(path))
    for override in overrides:
        _apply_override(data, override)
    return build_config(data, str(path))


def dump_config(config: Config) -> str:
    """The resolved config as YAML, in section order (what `gigpo config` prints and runs save)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
