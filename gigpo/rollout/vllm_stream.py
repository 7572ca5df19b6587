"""Continuous batching for one-prompt requests: a thread feeds a `vllm.LLM`'s engine as requests arrive.

`vllm.LLM.generate` takes a whole batch and returns when its last request ends. An async rollout has
one prompt ready at a time (an episode whose env step just ended), so this stream adds each request
to the engine the moment it is submitted and hands each result back the moment it finishes; vLLM's
scheduler batches whatever is in flight. The engine core runs in its own process: `step()` here only
collects its outputs, so the thread mostly waits.

The engine is not thread-safe: every engine call, here and in the generator (generate, weight sync),
holds the generator's lock.
"""
from __future__ import annotations

import itertools
import queue
import threading
from typing import Any, Callable, Optional, Union

OutputCallback = Callable[[Union[Any, BaseException]], None]
"""Gets the finished vllm RequestOutput, or the error that ended the request."""

_STOP = object()


class RequestStream:
    """Adds submitted requests to `llm.llm_engine` and steps it from one background thread."""

    def __init__(self, llm: Any, lock: threading.RLock) -> None:
        self._llm = llm
        self._lock = lock
        self._inbox: "queue.Queue[Any]" = queue.Queue()
        self._waiting: dict[str, OutputCallback] = {}
        self._ids = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet answered."""
        return len(self._waiting) + self._inbox.qsize()

    def submit(self, prompt_ids: list[int], params: Any, lora_request: Any, done: OutputCallback) -> None:
        if self._error is not None:
            raise RuntimeError(f"the vLLM request stream stopped: {self._error!r}") from self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gigpo-vllm-stream", daemon=True)
            self._thread.start()
        self._inbox.put((prompt_ids, params, lora_request, done))

    def close(self) -> None:
        """Stop the thread; requests still in flight get an error."""
        if self._thread is not None:
            self._inbox.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        from vllm.sampling_params import RequestOutputKind

        engine = self._llm.llm_engine
        try:
            while True:
                new = [self._inbox.get()] if not self._waiting else []  # idle: sleep until a request comes
                while True:
                    try:
                        new.append(self._inbox.get_nowait())
                    except queue.Empty:
                        break
                if any(item is _STOP for item in new):
                    raise RuntimeError("the generator was closed with requests in flight")
                with self._lock:
                    for prompt_ids, params, lora_request, done in new:
                        params.output_kind = RequestOutputKind.FINAL_ONLY  # one answer per request, at its end
                        rid = f"gigpo-stream-{next(self._ids)}"  # outputs carry this id (vLLM keeps its own inside)
                        try:
                            engine.add_request(rid, {"prompt_token_ids": prompt_ids}, params, lora_request=lora_request)
                        except (ValueError, TypeError) as exc:  # this request's fault (too long, bad ids)
                            done(exc)
                            continue
                        self._waiting[rid] = done
                    outputs = engine.step() if self._waiting else []
                for output in outputs:
                    if output.finished:
                        self._waiting.pop(output.request_id)(output)
        except BaseException as exc:  # the engine died (or we were closed): every waiting request hears of it
            self._error = exc
            waiting, self._waiting = self._waiting, {}
            for done in waiting.values():
                done(exc)
            while True:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    item[3](exc)
