"""Peak resident memory per phase of an iteration, this process and its children (vLLM, env workers).

`ru_maxrss` only ever grows, so it cannot say which phase set the peak. Linux can reset a process's
peak ("high water mark", VmHWM in /proc/PID/status) by writing 5 to /proc/PID/clear_refs: reset at
the start of a phase, read at its end, and the value is that phase's own peak. Children's peaks are
added to ours; they need not have peaked at the same instant, so the sum is an upper bound.
Where /proc or clear_refs is unavailable (not Linux), nothing is reported.
On CUDA the same phases also report `perf/peak_gpu_gb/<phase>`: PyTorch's own allocator peak on this
rank's device (reset per phase with `torch.cuda.reset_peak_memory_stats`), which is what decides an
out-of-memory error; a generator in another process (vLLM) is not counted in it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
from typing import Optional

import psutil
import torch


def _status_kib(pid: int, field: str) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _family() -> list[int]:
    """This process and its live descendants."""
    me = psutil.Process()
    try:
        children = [c.pid for c in me.children(recursive=True)]
    except psutil.Error:
        children = []
    return [me.pid, *children]


def _load_libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _load_libc()


def release_freed_memory() -> None:
    """Hand memory freed inside this process back to the kernel (glibc `malloc_trim`).

    glibc keeps freed heap pages for reuse, so the fp32 copy a model is loaded in, or a finished phase's
    activations, stay in RSS; when the next allocations do not fit those holes they add to it. Trimming
    between phases makes each phase's peak its own. A no-op where libc has no malloc_trim (not glibc).
    Only the young garbage-collector generations are swept (0.1 ms): tensors are freed by reference
    counting, and a full `gc.collect()` walks every object of torch and transformers, 0.19 s a phase,
    a third of a `sokoban_tiny` iteration (measured 2026-11-24).
    """
    gc.collect(1)
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def reset_peaks() -> bool:
    """Reset the peak RSS of this process and its descendants; False where the kernel does not allow it."""
    ok = False
    for pid in _family():
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as fh:
                fh.write("5")
            ok = True
        except OSError:
            continue
    return ok


def peak_rss_gib() -> Optional[float]:
    """Sum of the peak RSS (VmHWM) of this process and its live descendants since their last reset, GiB."""
    values = [_status_kib(pid, "VmHWM") for pid in _family()]
    values = [v for v in values if v is not None]
    return sum(values) / 2**20 if values else None


def rss_gib() -> Optional[float]:
    """Current RSS of this process and its live descendants, GiB."""
    values = [_status_kib(pid, "VmRSS") for pid in _family()]
    values = [v for v in values if v is not None]
    return sum(values) / 2**20 if values else None


class PhaseMemory:
    """Collects `perf/peak_rss_gb/<phase>` (and `perf/peak_gpu_gb/<phase>` on CUDA): reset at a phase's
    start, read at its end."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and os.path.exists("/proc/self/clear_refs")
        self.gpu = enabled and torch.cuda.is_available()
        self.peaks: dict[str, float] = {}
        self.gpu_peaks: dict[str, float] = {}

    def start(self) -> None:
        release_freed_memory()
        if self.enabled:
            self.enabled = reset_peaks()
        if self.gpu:
            torch.cuda.reset_peak_memory_stats()

    def synchronize(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def stop(self, phase: str) -> None:
        if self.gpu:
            peak_gpu = torch.cuda.max_memory_allocated() / 2**30
            self.gpu_peaks[phase] = max(self.gpu_peaks.get(phase, 0.0), peak_gpu)
        if not self.enabled:
            return
        peak = peak_rss_gib()
        if peak is not None:
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), peak)

    def metrics(self) -> dict[str, float]:
        out = {f"perf/peak_rss_gb/{phase}": value for phase, value in self.peaks.items()}
        out.update({f"perf/peak_gpu_gb/{phase}": value for phase, value in self.gpu_peaks.items()})
        return out


def peak_rss_gb() -> float:
    """Peak resident memory of this process and its finished children (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 2**20
