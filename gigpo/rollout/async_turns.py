"""Async turns: each episode moves on as soon as its own action is ready, not when the turn's slowest is.

An episode cycles prompt -> engine -> env on its own. Its prompt is submitted the moment its env step
ends (the engine batches whatever is in flight: vLLM's continuous batching), and its answer goes to its
env worker the moment its generation ends (`EnvPool.submit_step`). One thread drives both: it waits on
the env pool and on a wake-up socket that the engine's completion callbacks write to.

Samples: request (trajectory t, step s) is seeded from (settings.seed, t, s) alone (`request_seed`), so a
run repeats whatever order requests finish in; the batched driver seeds by turn and position instead, so
with temperature > 0 the two drivers draw different samples from the same seed. Greedy decoding gives the
same episodes. Rows are sorted to the batched driver's (step, traj) order.
"""
from __future__ import annotations

import queue
import socket
import time
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Any, Callable, Optional

from gigpo.envs.pool import EnvPool, EpisodeView
from gigpo.infra.seeds import request_seed
from gigpo.rollout.generator import CompletionCallback, Generator
from gigpo.rollout.records import PromptFn, RolloutTally, env_answer
from gigpo.rollout.types import Completion, SamplingSettings


class CompletionInbox:
    """Completions handed over from engine threads; `fileno` turns readable when one is waiting."""

    def __init__(self) -> None:
        self._items: "queue.SimpleQueue[tuple[int, Any]]" = queue.SimpleQueue()
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)

    def fileno(self) -> int:
        return self._read.fileno()

    def callback(self, key: int) -> CompletionCallback:
        def done(answer: Any) -> None:
            self._items.put((key, answer))
            try:
                self._write.send(b"!")
            except (BlockingIOError, OSError):  # the buffer is full, so the socket is readable anyway
                pass
        return done

    def wait(self, timeout: Optional[float] = None) -> None:
        wait([self._read], timeout=timeout)

    def drain(self) -> list[tuple[int, Any]]:
        try:
            while self._read.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        items = []
        while True:
            try:
                items.append(self._items.get_nowait())
            except queue.Empty:
                return items

    def close(self) -> None:
        self._read.close()
        self._write.close()


def play_async(pool: EnvPool, generator: Generator, prompt_fn: PromptFn, settings: SamplingSettings,
               tally: RolloutTally, progress: Optional[Callable[[int, int], None]]) -> None:
    """Play every live episode of `pool` to its end, each at its own pace; rows go to `tally`.

    Phase times overlap here: `seconds_env` is time spent waiting while some env step was running,
    `seconds_generate` time spent waiting on generation alone.
    """
    total = len(pool.episodes)
    inbox = CompletionInbox()
    asked: dict[int, tuple[EpisodeView, list[int]]] = {}  # episode -> (view, prompt) of its step under way
    answered: dict[int, Completion] = {}  # episode -> completion sent to its env, step not yet back
    ended = sum(v.done for v in pool.episodes)

    def ask(views: list[EpisodeView]) -> None:
        for view, prompt in zip(views, tally.prompts(prompt_fn, views)):
            asked[view.episode_idx] = (view, prompt)
            traj = tally.traj_offset + view.episode_idx
            request = settings if settings.seed is None else replace(
                settings, seed=request_seed(settings.seed, traj, view.step))
            generator.submit(prompt, request, inbox.callback(view.episode_idx))

    def stepped(after: EpisodeView) -> Optional[EpisodeView]:
        """Record the step that led to `after`; the view to prompt next, or None when the episode ended."""
        nonlocal ended
        before, prompt = asked.pop(after.episode_idx)
        tally.record(before, prompt, answered.pop(after.episode_idx), after)
        if after.done:
            ended += 1
            if progress is not None:
                progress(ended, total)
            return None
        return after

    try:
        ask([v for v in pool.episodes if not v.done])
        while asked:
            t0 = time.perf_counter()
            if pool.steps_in_flight:
                results = pool.poll(timeout=None, wake=[inbox])
                tally.seconds["env"] += time.perf_counter() - t0
            else:
                inbox.wait()
                results = []
                tally.seconds["generate"] += time.perf_counter() - t0
            next_views = [view for view in map(stepped, results) if view is not None]
            for idx, answer in inbox.drain():
                if isinstance(answer, BaseException):
                    raise RuntimeError(f"generation failed for episode {idx}: {answer}") from answer
                answered[idx] = answer[0]
                current = pool.episode(idx)
                if current.done:  # ended by the pool meanwhile (a failed replay after another episode's crash)
                    view = stepped(current)
                else:
                    pool.submit_step(idx, env_answer(answer[0]))
                    view = None
                if view is not None:
                    next_views.append(view)
            if next_views:
                ask(sorted(next_views, key=lambda v: v.episode_idx))
    finally:
        inbox.close()
        while pool.steps_in_flight:  # leave the pool usable (an error above may leave steps running)
            pool.poll(timeout=None)

