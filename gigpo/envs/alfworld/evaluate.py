"""Success rate on an ALFWorld split, overall and per task type, for any policy over episode views.

A policy maps the live episodes' views (`gigpo.envs.EpisodeView`: task, observation, history,
admissible actions, info) to one action text each; the trainer passes its generator-backed policy,
tests pass `expert_policy`. Every task of the split is played once (or `episodes` seeds from
`seed_start`), in an `EnvPool`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from gigpo.envs.alfworld import ENV_ID
from gigpo.envs.alfworld.data import find_tasks
from gigpo.envs.alfworld.game import MAX_STEPS, TASK_TYPES
from gigpo.envs.pool import EnvPool, EpisodeView

Policy = Callable[[Sequence[EpisodeView]], list[str]]

NOT_COMPARABLE = (
    "these are generated tasks (gigpo envs alfworld-generate): ALFWorld's text, commands and dynamics, "
    "but not its object distribution or task splits; scores are NOT comparable with published ALFWorld numbers"
)


def expert_policy(views: Sequence[EpisodeView]) -> list[str]:
    """The fixed hand-coded expert as a policy; needs env kwargs `expert=True` (else a ValueError)."""
    actions = []
    for view in views:
        if "expert_action" not in view.info and view.info.get("action_valid", True):
            raise ValueError("expert_policy needs the env built with expert=True (env_kwargs={'expert': True})")
        actions.append(f"<action>{view.info.get('expert_action') or 'look'}</action>")
    return actions


@dataclass
class EvalResult:
    split: str
    episodes: int
    wins: int
    by_type: dict[str, tuple[int, int]]  # task type -> (wins, episodes)
    mean_steps: float
    generated: bool
    notes: list[str] = field(default_factory=list)

    @property
    def success(self) -> float:
        return self.wins / self.episodes if self.episodes else 0.0

    def metrics(self, prefix: str = "eval/alfworld/") -> dict[str, float]:
        """Namespaced numbers for the trainer's logger: success, success/<task type>, mean_steps."""
        out = {f"{prefix}success": self.success, f"{prefix}mean_steps": self.mean_steps}
        for task_type, (wins, total) in self.by_type.items():
            out[f"{prefix}success/{task_type}"] = wins / total
        return out

    def summary(self) -> str:
        lines = [f"ALFWorld {self.split}: success {self.success:.3f} ({self.wins}/{self.episodes}), "
                 f"mean steps {self.mean_steps:.1f}"]
        for task_type in TASK_TYPES:
            if task_type in self.by_type:
                wins, total = self.by_type[task_type]
                lines.append(f"  {task_type:<32} {wins / total:.3f} ({wins}/{total})")
        if self.generated:
            lines.append(f"NOTE: {NOT_COMPARABLE}.")
        lines.extend(f"NOTE: {note}" for note in self.notes)
        return "\n".join(lines)


def evaluate(
    policy: Policy,
    data_path: Optional[str] = None,
    split: str = "valid_unseen",
    task_types: Optional[Sequence[str]] = None,
    episodes: Optional[int] = None,
    seed_start: int = 0,
    workers: Optional[int] = None,
    max_steps: int = MAX_STEPS,
    env_kwargs: Optional[dict[str, Any]] = None,
) -> EvalResult:
    """Play `episodes` (default: every task of the split once) with `policy`; count wins per task type.

    Episode i resets with seed `seed_start + i`, i.e. task `(seed_start + i) % num_tasks`.
    """
    filters = {key: (env_kwargs or {}).get(key) for key in ("scene_range", "max_walkthrough")}
    tasks = find_tasks(data_path, split, task_types, **filters)  # the env's own task list: one episode a task
    episodes = len(tasks) if episodes is None else episodes
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    kwargs = {"data_path": data_path, "split": split, "task_types": list(task_types) if task_types else None,
              **(env_kwargs or {})}
    seeds = [seed_start + i for i in range(episodes)]
    with EnvPool(ENV_ID, kwargs, max_steps=max_steps, workers=workers) as pool:
        views = pool.reset(seeds, group_size=1)
        while True:
            live = [v for v in views if not v.done]
            if not live:
                break
            actions = policy(live)
            if len(actions) != len(live):
                raise ValueError(f"policy returned {len(actions)} actions for {len(live)} episodes")
            pool.step({v.episode_idx: a for v, a in zip(live, actions)})
            views = pool.episodes
        errors = [v.error for v in views if v.error]
    by_type: dict[str, list[int]] = {}
    for view in views:
        task_type = view.task_type or "unknown"
        counts = by_type.setdefault(task_type, [0, 0])
        counts[0] += int(view.won)
        counts[1] += 1
    notes = [f"{len(errors)} episode(s) ended by an env error, e.g. {errors[0]}"] if errors else []
    return EvalResult(
        split=split,
        episodes=len(views),
        wins=sum(int(v.won) for v in views),
        by_type={t: (c[0], c[1]) for t, c in by_type.items()},
        mean_steps=sum(v.step for v in views) / len(views),
        generated=any(t.generated for t in tasks),
        notes=notes,
    )
