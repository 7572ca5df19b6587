"""Per-iteration metrics: one JSON line per iteration, a console summary line, and wandb; at a run's end its
curves and `done.json`.

Names are namespaced (`rollout/`, `eval/`, `adv/`, `loss/`, `perf/`, `time/`); docs/metrics.md lists them.
"""
from __future__ import annotations

import json
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional


class PhaseTimer:
    """Wall time per phase of one iteration (`time/<phase>` seconds) and its peak resident memory
    (`perf/peak_rss_gb/<phase>`, gigpo.trainer.memory)."""

    def __init__(self, memory: bool = True) -> None:
        from gigpo.trainer.memory import PhaseMemory

        self.seconds: dict[str, float] = {}
        self.memory = PhaseMemory(memory)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        self.memory.start()
        try:
            yield
        finally:
            self.memory.synchronize()  # CUDA kernels still queued belong to this phase's time
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
            self.memory.stop(phase)

    def metrics(self) -> dict[str, float]:
        return {**{f"time/{k}": v for k, v in self.seconds.items()}, **self.memory.metrics()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


class MetricsLogger:
    """Appends metrics to `metrics.jsonl`, prints a summary line, and mirrors to wandb if enabled."""

    SUMMARY_KEYS = ("rollout/success", "eval/success", "rollout/return", "rollout/episode_length",
                    "loss/kl", "loss/entropy", "time/iteration")

    def __init__(self, run_dir: Path, wandb_mode: str = "disabled", project: str = "gigpo",
                 config: Optional[dict[str, Any]] = None, run_name: Optional[str] = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self._wandb = None
        if wandb_mode != "disabled":
            import wandb

            os.environ.setdefault("WANDB_SILENT", "true")
            self._wandb = wandb.init(project=project, name=run_name, dir=str(run_dir), mode=wandb_mode,
                                     config=config, resume="allow")

    def truncate_after(self, iteration: int) -> None:
        """On resume: drop lines of iterations the checkpoint does not contain, so none repeat."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("iteration", 0) <= iteration]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        record = {"iteration": iteration, **{k: _jsonable(v) for k, v in sorted(metrics.items())}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=iteration)

    @classmethod
    def summary_line(cls, iteration: int, total: int, metrics: dict[str, Any]) -> str:
        parts = [f"iter {iteration}/{total}"]
        for key in cls.SUMMARY_KEYS:
            if key in metrics:
                parts.append(f"{key.split('/', 1)[1] if key.startswith('rollout/') else key}={metrics[key]:.3g}")
        return "  ".join(parts)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finish(run_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """Curves, a final summary on the console, and `done.json` (what `gigpo compare` looks for)."""
    from gigpo.experiments.plots import plot_run

    records = read_metrics(run_dir)
    plot_run(records, run_dir / "curves.png")
    evals = [r for r in records if "eval/success" in r]
    summary = {"iterations": state["iteration"], "env_steps_total": state["env_steps_total"],
               "start_eval_success": evals[0]["eval/success"] if evals else None,
               "final_eval_success": evals[-1]["eval/success"] if evals else None,
               "best_eval_success": max(r["eval/success"] for r in evals) if evals else None,
               "curves": str(run_dir / "curves.png"), "metrics": str(run_dir / "metrics.jsonl")}
    (run_dir / "done.json").write_text(json.dumps(summary, indent=1))
    print("\n== gigpo summary ==")
    for key, value in summary.items():
        shown = f"{value:.1%}" if isinstance(value, float) and "success" in key else value
        print(f"  {key}: {shown}")
    return summary
