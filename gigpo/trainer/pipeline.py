"""Where the loop gets each iteration's rollout, and when new weights reach the generator (rollout.mode).

sync: `collect(i)` plays iteration i's rollout now, on the caller's thread, and the weights are pushed
right after the update (gigpo.rollout.weight_sync.push_weights, which loads and checks them): generation
waits for the update and the update for generation.

async: one producer thread owns the generator and the env pool. Everything that touches them runs on
it as a job, in the order the controller submits them: rollouts, weight syncs, evaluations. So a weight
sync lands only between two rollouts, never while one is in flight (the generator is single-caller), and
the rollout of iteration k+1 plays while the controller runs iteration k's update.

Staleness, in policy versions: a sample's lag is the number of weight syncs between the weights that
sampled it and the trainer's weights when it is trained on. Every update is followed by a sync, so a
rollout submitted once iterations up to `settled` are updated (or skipped) lags by at most
`j - 1 - settled` when it is iteration j's; the pipeline submits rollout j only when that is at most
`max_staleness` (it blocks, never drops), and `correct` checks every sample again before the update.
Versions are the loop's labels (the iteration that produced them), so the lag counts syncs, not labels:
an iteration that skipped its update (dynamic sampling found no signal) syncs nothing and adds no lag.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generic, Iterable, Optional, Sequence, TypeVar

import torch

from gigpo.config import RolloutConfig
from gigpo.rollout.generator import Generator
from gigpo.rollout.weight_sync import drain
from gigpo.trainer.off_policy import staleness
from gigpo.trainer.rollout_correction import Correction

T = TypeVar("T")
_ROLLOUT = RolloutConfig()


class PipelineStopped(RuntimeError):
    """Raised inside a rollout that was in flight when the pipeline closed (its result is discarded)."""


class ProducerGenerator(Generator):
    """The generator as the producer thread sees it: stops an abandoned rollout at its next request, and
    with `mixed` versions applies weights that arrived meanwhile before the next batched turn."""

    def __init__(self, inner: Generator, stop: threading.Event, mixed: bool) -> None:
        super().__init__()
        self.inner, self.stop, self.mixed = inner, stop, mixed
        self.turns = inner.turns
        self._pending: Optional[tuple[list, int]] = None
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return self.inner.version

    @property
    def num_replicas(self) -> int:
        return self.inner.num_replicas

    @property
    def can_submit(self) -> bool:
        return self.inner.can_submit

    def _check(self) -> None:
        if self.stop.is_set():
            raise PipelineStopped("the rollout pipeline closed while this rollout was in flight")

    def generate(self, prompts, settings):
        self._check()
        if self.mixed:  # between two batched turns nothing is in flight: newer weights may land here
            self.apply_pending()
        return self.inner.generate(prompts, settings)

    def submit(self, prompt, settings, done) -> None:
        self._check()
        self.inner.submit(prompt, settings, done)

    def offer(self, weights: list, version: int) -> None:
        """Controller thread, mixed versions: newer weights, for the producer's next batched turn."""
        with self._lock:
            self._pending = (weights, version)

    def apply_pending(self) -> None:
        """Producer thread: load the newest offered weights, if any (older offers were superseded)."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.apply(*pending)

    def apply(self, weights: list, version: int) -> None:
        """Producer thread: load `weights` unless these or newer ones were loaded already (mixed versions
        may have loaded them between two turns)."""
        if version > self.inner.version:
            self.inner.update_weights(weights, version=version)

    def update_weights(self, named_tensors: Iterable, version: int) -> None:
        self.inner.update_weights(named_tensors, version)

    def end_rollout(self) -> None:
        self.inner.end_rollout()

    def close(self) -> None:
        self.inner.close()


class RolloutPipeline(Generic[T]):
    """`collect(i)` -> iteration i's rollout; `sync(weights, i)` after its update; `call(fn)` for evaluation;
    `correct(samples, versions, behaviour_logprobs)` before the update; `close()` in the loop's `finally`,
    before the generator and pools close. Built on every rank; only rank 0 has a generator (`produce` and `generator` None
    elsewhere), the others only join the collective weight gathering and compute the same corrections."""

    def __init__(self, produce: Optional[Callable[[int], T]], generator: Optional[Generator],
                 mode: str = _ROLLOUT.mode, max_staleness: int = _ROLLOUT.max_staleness, version: int = 0,
                 last_iteration: Optional[int] = None, correction: Optional[Correction] = None,
                 mixed_versions: bool = _ROLLOUT.group_versions == "mixed") -> None:
        if mode not in ("sync", "async"):
            raise ValueError(f"rollout.mode={mode!r} must be sync or async")
        if max_staleness < 1:
            raise ValueError(f"rollout.max_staleness={max_staleness} must be at least 1")
        self.produce, self.mode, self.max_staleness = produce, mode, max_staleness
        self.correction, self.last_iteration = correction, last_iteration
        self.generator = generator
        self.history = [version]
        """Versions in the order they were synced (the first: the weights the run started from)."""
        self.settled = 0
        self.next_rollout: Optional[int] = None
        self.futures: dict[int, Future] = {}
        self.stop = threading.Event()
        self.executor: Optional[ThreadPoolExecutor] = None
        if mode == "async" and generator is not None:
            self.generator = ProducerGenerator(generator, self.stop, mixed_versions)
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gigpo-rollout")

    @property
    def is_async(self) -> bool:
        return self.mode == "async"

    @property
    def version(self) -> int:
        """The trainer's version: the last one synced (every update is followed by a sync)."""
        return self.history[-1]

    # ------------------------------------------------------------------ controller side

    def collect(self, iteration: int) -> T:
        """Iteration `iteration`'s rollout: played now (sync), or waited for (async; started earlier)."""
        if self.produce is None:
            raise RuntimeError("collect() on a rank without a generator")
        if self.executor is None:
            return self.produce(iteration)
        self.settled = iteration - 1
        if self.next_rollout is None:
            self.next_rollout = iteration
        self._submit_allowed()
        return self.futures.pop(iteration).result()

    def sync(self, weights: Iterable, version: int) -> dict[str, float]:
        """async mode (gigpo.rollout.weight_sync.push_weights calls it): new weights (every rank iterates
        them: ZeRO-3 gathers are collective) for the generator. A copy is queued for the producer, which loads
        it after the rollout in flight (or, with mixed versions, before that rollout's next batched turn)."""
        if not self.is_async:
            raise RuntimeError("RolloutPipeline.sync queues weights in rollout.mode=async; in sync mode push "
                               "them with gigpo.rollout.weight_sync.push_weights, which loads and checks them now")
        self.history.append(version)
        if self.generator is None:
            drain(weights)
            return {}
        producer: ProducerGenerator = self.generator  # type: ignore[assignment]
        snapshot = list(weights)  # a copy: the actor trains on while the producer loads it
        if producer.mixed:
            producer.offer(snapshot, version)
        # in submission order: the rollouts submitted before this job play on the older weights, as counted
        self.executor.submit(producer.apply, snapshot, version)
        self.settled = max(self.settled, version)  # versions are the iterations whose update made them
        if self.next_rollout is not None:
            self._submit_allowed()
        return {}

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (an evaluation) where the generator lives: after the rollout in flight and the weights
        queued so far, before the rollouts not yet started (they are queued again behind it; they can only
        get fresher weights by that, never staler)."""
        if self.executor is None:
            return fn()
        waiting = sorted(j for j, future in self.futures.items() if future.cancel())
        result = self.executor.submit(fn)
        for j in waiting:
            self.futures[j] = self.executor.submit(self.produce, j)
        return result.result()

    def correct(self, samples: Sequence[Any], versions: Sequence[int],
                behaviour_logprobs: Sequence[Sequence[float]]) -> dict[str, float]:
        """Before the update, in either mode. async: check every sample's staleness (`versions`: the policy
        version that sampled each). With the rollout correction on (algorithm.rollout_correction; async's
        default): attach the generator's `behaviour_logprobs` to each sample, from which the actor's loss
        weights and masks it (gigpo.trainer.rollout_correction) and logs the mismatch."""
        metrics: dict[str, float] = {}
        if self.is_async:
            position = {v: i for i, v in enumerate(self.history)}
            unknown = sorted({int(v) for v in versions} - set(position))
            if unknown:
                raise RuntimeError(f"samples of policy versions {unknown} were never synced (known: {self.history})")
            metrics = staleness(len(self.history) - 1, [position[int(v)] for v in versions], self.max_staleness)
        if self.correction is not None:
            if len(behaviour_logprobs) != len(samples):
                raise ValueError(f"algorithm.rollout_correction needs the generator's log-probs of every sample: got "
                                 f"{len(behaviour_logprobs)} for {len(samples)} samples (did the rollout sample with "
                                 "SamplingSettings(logprobs=False)?)")
            for sample, behaviour in zip(samples, behaviour_logprobs):
                sample.logp_behaviour = torch.as_tensor(behaviour, dtype=torch.float32)
        return metrics

    def close(self) -> None:
        """Abandon rollouts not yet trained on and join the producer thread (no thread outlives the run).
        A rollout in flight stops at its next generation request."""
        if self.executor is None:
            return
        self.stop.set()
        for future in self.futures.values():
            future.cancel()
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.futures.clear()

    # ------------------------------------------------------------------ scheduling

    def _submit_allowed(self) -> None:
        """Start every rollout j whose lag at its update, at most j - 1 - settled, is within the bound."""
        assert self.executor is not None and self.next_rollout is not None
        while self.next_rollout <= self.settled + self.max_staleness + 1 and (
                self.last_iteration is None or self.next_rollout <= self.last_iteration):
            self.futures[self.next_rollout] = self.executor.submit(self.produce, self.next_rollout)
            self.next_rollout += 1
