"""Progress of a long phase: a tqdm bar on a terminal, plain lines in a log file.

tqdm redraws its bar with carriage returns. In a file (`gigpo train > log 2>&1`) each redraw stays: one
run's log was 196 KB, most of it bar fragments. So when the bar's stream is not a terminal, progress is
a plain line at each tenth of the way, at most one per `min_interval_s`; with an interval, a phase
shorter than it prints nothing (the loop's own line per iteration says it finished).
`quiet_library_bars` does the same for the bars of the libraries underneath (loading weights, writing
shards), which have no line mode: in a log file they are switched off.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable, Iterator, Optional, TextIO, TypeVar

LINE_EVERY_S = 30.0
"""In a log file, the shortest gap between two progress lines of an episode phase (rollout, evaluation)."""
TENTHS = 10
T = TypeVar("T")


class Progress:
    """One phase's progress (tqdm's `update`/`set_postfix`/`close`, plus `__call__(done, total)`)."""

    def __init__(self, desc: str, total: Optional[int] = None, unit: str = "it", enabled: bool = True,
                 min_interval_s: float = 0.0, leave: bool = False, stream: Optional[TextIO] = None) -> None:
        self.desc, self.total, self.unit, self.min_interval_s = desc, total, unit, min_interval_s
        self.stream = stream if stream is not None else sys.stderr  # where tqdm writes
        self.enabled = enabled
        self.done = 0
        self.postfix = ""
        self.start = self._last_line = time.monotonic()
        self._tenth = 0
        self._printed = False
        self.bar: Any = None
        if enabled and is_terminal(self.stream):
            from tqdm import tqdm

            self.bar = tqdm(desc=desc, total=total, unit=unit, leave=leave, dynamic_ncols=True, file=self.stream)

    def __call__(self, done: int, total: int) -> None:
        """The `progress` callback of a rollout: `done` of `total` finished."""
        self.total = total
        self._advance(done)

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        """The items, each counted once the loop body has run on it (as iterating a tqdm bar); closes at the end."""
        try:
            for item in items:
                yield item
                self.update()
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        self._advance(self.done + n)

    def set_postfix(self, **values: Any) -> None:
        """Shown after the count (`loss=0.123`), as tqdm's postfix."""
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())
        if self.bar is not None:
            self.bar.set_postfix(values, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.enabled and self._printed and self._tenth < TENTHS and self.total:
            self._line()  # a phase that printed lines says where it ended

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _advance(self, done: int) -> None:
        self.done = done
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.n = done
            self.bar.refresh()
            return
        if not self.enabled or not self.total:
            return
        tenth = min(TENTHS, done * TENTHS // self.total)
        now = time.monotonic()
        if tenth > self._tenth and now - self._last_line >= self.min_interval_s:
            self._tenth, self._last_line = tenth, now
            self._line()

    def _line(self) -> None:
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        postfix = f"  {self.postfix}" if self.postfix else ""
        self.stream.write(f"{self.desc}: {self.done}/{self.total} {self.unit}{share}  "
                          f"{time.monotonic() - self.start:.0f}s{postfix}\n")
        self.stream.flush()
        self._printed = True


def quiet_library_bars(stream: Optional[TextIO] = None) -> None:
    """When `stream` (stderr by default) is not a terminal, switch off Hugging Face's progress bars (transformers'
    "Loading weights", huggingface_hub's downloads) here and, through the environment, in child processes."""
    if is_terminal(stream):
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when huggingface_hub is imported
    if "huggingface_hub" in sys.modules:  # imported already: tell it directly
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils.logging import disable_progress_bar

        disable_progress_bar()


def is_terminal(stream: Optional[TextIO] = None) -> bool:
    """Whether `stream` (stderr by default, where bars go) is a terminal, so a bar may redraw in place."""
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without a descriptor
        return False
