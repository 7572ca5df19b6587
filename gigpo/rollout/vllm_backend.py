"""vLLM engine in the trainer's process (`vllm.LLM`), with weight sync through a shared-memory file, a
broadcast, or (weight_sync="inprocess") the trainer's tensors handed to the engine by reference.

The engine core runs in a worker process vLLM spawns, so scripts that build this generator need
an `if __name__ == "__main__":` guard. With weight_sync="inprocess" it runs in this process instead
(vLLM's VLLM_ENABLE_V1_MULTIPROCESSING=0), so the worker's `reload_weights` can take this process's tensors.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

from gigpo.infra.dtypes import canonical_dtype
from gigpo.infra.owner_watch import name_this_process_the_owner
from gigpo.infra.progress import is_terminal
from gigpo.rollout.engine_settings import EngineSettings
from gigpo.rollout.generator import CompletionCallback, Generator, check_prompts, check_version
from gigpo.rollout.types import Completion, SamplingSettings
from gigpo.rollout.vllm_stream import RequestStream


def build_engine(model_path: str, engine: EngineSettings) -> Any:
    """A vllm.LLM with gigpo's weight-sync worker extension. On CPU the KV cache is `kv_cache_gb` GiB
    (VLLM_CPU_KVCACHE_SPACE); `gpu_memory_utilization` is the share of a GPU (on CPU: of a NUMA node's
    RAM, which is why the KV size is set directly)."""
    if not Path(model_path, "config.json").is_file() and os.path.isdir(model_path):
        raise FileNotFoundError(f"{model_path} has no config.json; pass a directory saved with save_pretrained")
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(engine.kv_cache_gb)))  # read by the spawned engine
    name_this_process_the_owner()  # its worker ends with this process (gigpo/infra/owner_watch.py)
    from vllm import LLM

    if not _on_cpu():
        # A forked engine core cannot use CUDA once this process has touched it. vLLM switches to spawn only when
        # torch reports CUDA initialised, and on the H200 a DeepSpeed engine built first left fork poisoned without
        # that ("Cannot re-initialize CUDA in forked subprocess", docs/gpu.md). A user's own setting is kept.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

    kwargs: dict[str, Any] = dict(
        model=str(model_path), dtype=canonical_dtype(engine.dtype), seed=engine.seed,
        enable_prefix_caching=engine.enable_prefix_caching, max_num_seqs=engine.max_num_seqs,
        gpu_memory_utilization=engine.gpu_memory_utilization, enforce_eager=engine.enforce_eager,
        worker_extension_cls="gigpo.rollout.weight_sync.worker.WeightSyncExtension",
        use_tqdm_on_load=is_terminal(),  # its bars (loading weights) would leave '\r' fragments in a log file
    )
    max_model_len, max_lora_rank = engine.max_model_len, engine.max_lora_rank
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if max_lora_rank is not None:  # adapter-only syncs (load_adapter): one adapter at a time, the newest
        kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
    parallel = parallel_kwargs(engine.tensor_parallel_size)
    kwargs.update(parallel)
    if engine.sleep_level and not _on_cpu():  # vLLM's sleep mode is CUDA's (its allocator can unmap pages)
        kwargs["enable_sleep_mode"] = True
    if _on_cpu():
        reserve_no_core_on_a_small_cpu(parallel)
        eager_vocab_mask_for_a_sharded_cpu_engine(parallel)
        # vLLM-CPU crashes ("CPU Generator does not use offset") when a seeded request's prompt is
        # split over steps by chunked prefill; without chunking a step must fit a whole prompt.
        if max_model_len is None:
            from transformers import AutoConfig

            max_model_len = AutoConfig.from_pretrained(model_path).max_position_embeddings
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 4096))
    if engine.weight_sync != "inprocess" and not parallel and not core_in_process_asked():
        return LLM(**kwargs)
    with engine_core_in_process():  # the external launcher runs the core in process too
        return LLM(**kwargs)


SMALL_CPU_CORES = 4
"""At most this many usable cores, a one-rank engine's worker gets all of them (`reserve_no_core_on_a_small_cpu`)."""


def reserve_no_core_on_a_small_cpu(parallel: dict[str, Any]) -> None:
    """Let a one-rank CPU engine's worker compute on every core of a small machine.

    vLLM-CPU binds its worker's OpenMP threads to all cores but `local_world_size` (one here), which it keeps for the
    engine core's scheduler loop. On 2 cores that halves generation: SmolLM2 bf16, 16 prompts of 600 tokens, 32
    sampled tokens each, took 5.1 s a batch with one core reserved and 2.9 s with none, 1.76x
    (benchmarks/bench_cpu_engine_cores.py, docs/benchmarks.md); the scheduler then shares the cores with the worker.
    On larger machines one core is a small share and vLLM's default stays, as do a user's own
    VLLM_CPU_NUM_OF_RESERVED_CPU and every multi-rank layout (their ranks split the cores between them)."""
    if parallel or "VLLM_CPU_NUM_OF_RESERVED_CPU" in os.environ:
        return
    if len(os.sched_getaffinity(0)) <= SMALL_CPU_CORES:
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"  # read by the worker vLLM spawns (or builds in process)


def eager_vocab_mask_for_a_sharded_cpu_engine(parallel: dict[str, Any]) -> None:
    """Run vLLM's vocab-shard mask (`get_masked_input_and_mask`) eagerly in a tensor-parallel CPU engine.

    vLLM compiles that function with torch's inductor. With PyTorch held to AVX2 (`ATEN_CPU_CAPABILITY=avx2`, what a
    CPU without AVX-512 gets), torch 2.13's inductor compiled it wrong here: a two-rank engine died with `IndexError:
    index out of range` in its embedding (a copy of the function compiled in a script gave ids near 1e17 for the
    shard's 0..127; vLLM's own, called outside an engine, did not, so the trigger is not known). It is a handful of
    pointwise ops on the token ids, so eager costs nothing that matters. Only a sharded engine calls it, and a
    sharded engine (vLLM's external launcher) runs in this process, where the module's global is what it calls."""
    if not parallel:
        return
    import vllm.model_executor.layers.vocab_parallel_embedding as vocab

    vocab.get_masked_input_and_mask = getattr(vocab.get_masked_input_and_mask, "__wrapped__",
                                              vocab.get_masked_input_and_mask)


def core_in_process_asked() -> bool:
    """vLLM's own switch, VLLM_ENABLE_V1_MULTIPROCESSING=0, set by a user or a test: the engine core in this process.
    It spares the EngineCore and worker processes, each of which imports vLLM before the engine can start (on this
    2-core CPU at load ~4: a tiny model's engine ready in 79 s against 11 s in process). Built under
    `engine_core_in_process`, so the build leaves the caller's random state as it found it, as a separate core does."""
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1").strip() == "0"


class engine_core_in_process:
    """Build a vllm.LLM whose engine core (scheduler, worker, model) runs in this process, not in a spawned
    EngineCore process: vLLM reads VLLM_ENABLE_V1_MULTIPROCESSING when the engine is built. The caller's
    random state is kept: vLLM seeds the global generators of the process its worker runs in."""

    def __enter__(self) -> None:
        import random

        import numpy as np

        self.env = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.rng = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())

    def __exit__(self, *exc) -> bool:
        import random

        import numpy as np

        if self.env is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = self.env
        random.setstate(self.rng[0])
        np.random.set_state(self.rng[1])
        torch.random.set_rng_state(self.rng[2])
        return False


def trainer_world_size() -> int:
    """The ranks of the torch.distributed world this process belongs to (1 if it has none). Read from the
    initialised group, not from WORLD_SIZE: a generation server started by rank 0 inherits the rank's
    environment but is not a rank, and must build a standalone engine."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def parallel_kwargs(tensor_parallel_size: int, world_size: Optional[int] = None) -> dict[str, Any]:
    """vLLM's arguments for this rank's engine when the trainer runs on several ranks (none for one rank).

    vLLM's external launcher runs the engine in this process over the ranks' existing torch.distributed world,
    on this rank's device (cuda:LOCAL_RANK on GPUs), with no engine process of its own. vLLM lays the world out
    as independent engines of `tensor_parallel_size` consecutive ranks each (what it calls external data
    parallelism): with 1, every rank its own engine, generating whatever it is sent; with more, every rank of
    one engine must send it the same prompts in step (the trainer's replicas, `sharding.Share`)."""
    world = trainer_world_size() if world_size is None else world_size
    if world <= 1 and tensor_parallel_size == 1:
        return {}
    if world % tensor_parallel_size:
        raise ValueError(f"rollout.tensor_parallel_size={tensor_parallel_size} must divide the {world} ranks of this "
                         "launch: set trainer.nprocs to a multiple of it")
    return dict(tensor_parallel_size=tensor_parallel_size, distributed_executor_backend="external_launcher")


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMGenerator(Generator):
    """vllm.LLM owned by this process. Weight sync (its path chosen in gigpo.rollout.weight_sync.transports):
    a safetensors file in /dev/shm (`weight_sync="shm"`, `load_weights_file`), a broadcast into the workers
    (`"nccl"`), or the trainer's tensors by reference into an engine core in this process (`"inprocess"`,
    `load_tensors`, `takes_device_tensors`); the worker's `reload_weights` takes them (LM head included,
    even when tied) and `commit_version` resets the prefix cache."""

    rollout_backend = "vllm"

    def __init__(self, model_path: str, engine: EngineSettings = EngineSettings()) -> None:
        super().__init__(engine.tensor_parallel_size)
        self.llm = build_engine(model_path, engine)
        self._lora_request: Any = None
        """The adapter every request runs with after `load_adapter` (None: the engine's own weights)."""
        self.weight_sync = engine.weight_sync
        self.takes_device_tensors = engine.weight_sync == "inprocess"
        """update_weights wants the trainer's gathered tensors where they are (no host copies)."""
        self.lock = threading.RLock()
        """Held around every engine call: `generate`, syncs, and the request stream's thread."""
        self._stream = RequestStream(self.llm, self.lock)
        self.broadcast_sender: Any = None
        """weight_sync="nccl": the trainer's side of the broadcast group, opened at the first sync."""
        self.num_workers = self.llm.llm_engine.vllm_config.parallel_config.world_size
        """The engine's workers (the broadcast group's ranks besides the trainer)."""
        self.executor = str(self.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend)
        """vLLM's executor: external_launcher when the trainer runs on several ranks (this rank's engine, in process)."""
        self.can_sleep = bool(self.llm.llm_engine.vllm_config.model_config.enable_sleep_mode)
        """Built with vLLM's sleep mode (CUDA, sleep_level > 0): `sleep` and `wake_up` free and restore its memory."""
        self.vocab_size = self.llm.llm_engine.model_config.get_vocab_size()
        self.torch_dtype = self.llm.llm_engine.model_config.dtype
        self.tied_lm_head = bool(getattr(self.llm.llm_engine.model_config.hf_config, "tie_word_embeddings", False))
        # Test-only fault injection: the two steps a sync must not skip.
        self.fault_skip_prefix_reset = False
        self.fault_skip_lm_head = False

    def generate(self, prompts: list[list[int]], settings: SamplingSettings) -> list[Completion]:
        check_prompts(prompts, self.vocab_size)
        if self._stream.in_flight:  # vLLM's batch call would collect the submitted requests' outputs too
            raise RuntimeError(f"generate called with {self._stream.in_flight} submitted requests still running; "
                               "one caller drives a generator: wait for them first")
        with self.lock:
            outputs = self.llm.generate([{"prompt_token_ids": list(map(int, p))} for p in prompts],
                                        sampling_params(settings, len(prompts)), use_tqdm=False,
                                        lora_request=self._lora_request)
        return completions_from_outputs(outputs, self.version)

    @property
    def can_submit(self) -> bool:
        return True

    def submit(self, prompt: list[int], settings: SamplingSettings, done: CompletionCallback) -> None:
        """Continuous batching: the request joins the engine's running batch at once (see vllm_stream)."""
        check_prompts([prompt], self.vocab_size)

        def finished(output) -> None:
            done(output if isinstance(output, BaseException) else completions_from_outputs([output], self.version))

        self._stream.submit(list(map(int, prompt)), sampling_params(settings, 1)[0], self._lora_request, finished)

    def load_adapter(self, adapter_dir: str | Path, version: int) -> None:
        """Adapter-only sync: serve a peft adapter directory (LoRA over the engine's base weights)
        from now on, replacing the previous one. Needs an engine built with `max_lora_rank`."""
        from vllm.lora.request import LoRARequest

        check_version(version, self.version)
        self.check_idle()
        if not self.llm.llm_engine.vllm_config.lora_config:
            raise ValueError("load_adapter needs an engine built with max_lora_rank (vLLM's enable_lora)")
        request = LoRARequest(f"gigpo-v{version}", version, str(adapter_dir))
        with self.lock:
            if not self.llm.llm_engine.add_lora(request):
                raise RuntimeError(f"vLLM did not load the adapter in {adapter_dir}")
            if self._lora_request is not None:
                self.llm.llm_engine.remove_lora(self._lora_request.lora_int_id)
            self._lora_request = request
            self.commit_version(version)

    def load_weights_file(self, path: str | Path, version: int) -> None:
        """Load a full state dict the trainer wrote (the server's update path), then drop cached KV."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"weights file {path} does not exist; it must be on this machine (e.g. /dev/shm)")
        self.check_idle()
        with self.lock:
            self.llm.collective_rpc("gigpo_load_weights", args=(str(path), self.fault_skip_lm_head))
            self.commit_version(version)

    def load_tensors(self, tensors: Iterator[tuple[str, torch.Tensor]], version: int) -> None:
        """Hand the worker an iterator over the trainer's tensors, as the engine names them
        (weight_sync.tensors.engine_tensors): `collective_rpc` of an in-process engine calls the worker
        directly, so nothing is serialised, written or copied on the way."""
        parallel = self.llm.llm_engine.vllm_config.parallel_config
        one_worker_here = parallel.world_size == 1 or parallel.distributed_executor_backend == "external_launcher"
        if not one_worker_here or not hasattr(self.llm.llm_engine.engine_core, "engine_core"):
            # (under the external launcher this rank's worker holds its shard and takes its part of each tensor)
            raise RuntimeError("weight_sync=inprocess needs the engine core in this process with one worker "
                               "(built with weight_sync=inprocess, or on several ranks through vLLM's external launcher)")
        if self.fault_skip_lm_head:  # fault injection for tests: leaves the engine's packed LM head stale
            tensors = ((n, t) for n, t in tensors if n != "lm_head.weight")
        with self.lock:
            self.llm.collective_rpc("gigpo_load_tensors", args=(tensors,))
            self.commit_version(version)

    def commit_version(self, version: int) -> None:
        """End a sync: drop KV cached under the old weights, then stamp outputs with `version`."""
        if not self.fault_skip_prefix_reset:
            with self.lock:
                reset = self.llm.reset_prefix_cache()
            if not reset:
                raise RuntimeError("vLLM refused to reset its prefix cache after a weight sync; "
                                   "cached prompts would keep the old weights' KV")
        self._version = version

    def sleep(self, level: int) -> None:
        """Free the engine's GPU memory for the update (vLLM's sleep mode): level 1 moves its weights to host
        RAM and drops the KV cache, level 2 drops both (the next sync must reload the weights)."""
        if not self.can_sleep:
            raise RuntimeError("this engine was built without vLLM's sleep mode (sleep_level=0, or not on CUDA)")
        self.check_idle()
        with self.lock:
            self.llm.sleep(level=level)

    def wake_up(self) -> None:
        """Map the engine's memory again (weights restored at level 1) before it generates or loads weights."""
        with self.lock:
            self.llm.wake_up()
            self.llm.reset_prefix_cache()  # the KV cache was dropped while asleep

    @property
    def in_flight(self) -> int:
        """Submitted requests not yet answered."""
        return self._stream.in_flight

    def check_idle(self) -> None:
        """Refuse a sync (or sleep) while submitted requests run: their samples would mix two policies."""
        if self._stream.in_flight:
            raise RuntimeError(f"weight sync with {self._stream.in_flight} submitted requests still running: their "
                               "samples would mix two policies; wait for them (the rollout does) before syncing")

    def close(self) -> None:
        if getattr(self, "llm", None) is not None:
            self._stream.close()
            engine = self.llm.llm_engine
            if hasattr(engine, "engine_core"):
                engine.engine_core.shutdown()
            self.llm = None


def sampling_params(settings: SamplingSettings, num_prompts: int) -> list[Any]:
    """One SamplingParams per prompt: a per-request seed keeps samples independent of batching."""
    from vllm import SamplingParams

    greedy = settings.temperature == 0
    return [SamplingParams(
        n=settings.n, temperature=settings.temperature, top_p=1.0 if greedy else settings.top_p,
        max_tokens=settings.max_new_tokens, stop=list(settings.stop) or None, include_stop_str_in_output=True,
        stop_token_ids=list(settings.stop_token_ids) or None,
        # the sampled token's log-prob (top 0) only when asked for, in vLLM's flat form (no dict per token)
        logprobs=0 if settings.logprobs else None, flat_logprobs=settings.logprobs,
        seed=None if settings.seed is None else settings.seed + i,
    ) for i in range(num_prompts)]


def completions_from_outputs(outputs: list[Any], version: int) -> list[Completion]:
    """vLLM RequestOutputs -> prompt-major Completions with the sampled tokens' raw log-probs (None where
    the request asked for none)."""
    result = []
    for i, out in enumerate(outputs):
        for sample in out.outputs:
            ids = list(sample.token_ids)
            logprobs = None if sample.logprobs is None else sampled_logprobs(ids, sample.logprobs)
            result.append(Completion(prompt_index=i, token_ids=ids, text=sample.text, logprobs=logprobs,
                                     finish_reason="stop" if sample.finish_reason == "stop" else "length",
                                     weight_version=version))
    return result


def sampled_logprobs(ids: list[int], steps: Any) -> list[float]:
    """The sampled tokens' log-probs out of vLLM's per-position log-probs (top 0: the sampled token alone):
    read straight from the flat lists when they hold one entry per position, else position by position."""
    flat = getattr(steps, "token_ids", None)
    if flat is not None and list(flat) == ids:
        return list(steps.logprobs)
    return [step[t].logprob for t, step in zip(ids, steps)]
