"""Run B tasks x N group members in W worker processes, with faults confined to their episode.

    pool = EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=2)
    views = pool.reset(seeds=[0, 1], group_size=8)        # 16 episodes; 0-7 share seed 0
    views = pool.step({v.episode_idx: "<action>up</action>" for v in views if not v.done})
    pool.close()

Episode i belongs to group i // group_size and lives in worker i % W. Each call sends one message
per worker holding all its operations, and gets one message back.

Steps can also run one episode at a time, for a rollout where each episode moves on as soon as its
own action is ready: `submit_step(idx, text)` queues a step and returns at once; `poll(timeout)`
returns the views of submitted steps that have ended, as they end. A worker still runs one
operation at a time (the others wait in the parent, in submission order), so steps overlap across
workers: a latency-bound env wants about as many workers as live episodes.

Faults: an exception inside an env ends that episode (zero reward, `info["error"]`) and the pool
goes on. A step (or reset) running longer than `step_timeout_s`, or a worker process that dies,
gets the worker killed and restarted; the episode it was running ends the same way. The worker's
other episodes are rebuilt in the new worker by replaying their seed and actions (agent envs are
deterministic given the seed), so their results are the same as if nothing had happened.

Workers start with "spawn" (vLLM and torch threads live in the parent; forking them is unsafe).
"""
from __future__ import annotations

import multiprocessing as mp
import pickle
import signal
import time
import weakref
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any, Optional, Sequence

import gymnasium as gym

from gigpo.config import EnvConfig
from gigpo.infra.cores import usable_cores

# (kind, episode_idx, argument): kind is reset | step | replay | expert | probe | drop
_Op = tuple[str, int, Any]

_IDLE = 0.0
_POLL_S = 0.5
_SHOWN_INVALID_CHARS = 200


@dataclass(frozen=True)
class EpisodeView:
    """One episode as the training loop sees it after a reset or a step."""

    episode_idx: int
    group_idx: int
    seed: int
    step: int
    """Actions taken so far (valid or not)."""
    observation: str
    reward: float
    """Reward of the last step (0.0 after reset, and on an error)."""
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    task: str
    task_type: str
    action_format: str
    prompt_template: Optional[str]
    history: tuple[tuple[str, str], ...]
    """(observation, action) pairs before the current observation, oldest first."""

    @classmethod
    def before_reset(cls, episode_idx: int, group_idx: int, seed: int) -> "EpisodeView":
        """An episode the pool has not reset yet: no observation, no task."""
        return cls(episode_idx, group_idx, seed, step=0, observation="", reward=0.0, terminated=False, truncated=False,
                   info={}, task="", task_type="", action_format="", prompt_template=None, history=())

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def won(self) -> bool:
        return bool(self.info.get("won", False))

    @property
    def error(self) -> Optional[str]:
        return self.info.get("error")

    @property
    def anchor(self) -> Any:
        return self.info.get("anchor", self.observation)

    @property
    def admissible_actions(self) -> Optional[list[str]]:
        return self.info.get("admissible_actions")


@dataclass
class PoolStats:
    """Cumulative counts since the pool started."""

    episodes: int = 0
    steps: int = 0
    env_errors: int = 0
    """Exceptions raised by an env, and workers that died."""
    step_timeouts: int = 0
    worker_restarts: int = 0

    def as_metrics(self, prefix: str = "env/") -> dict[str, float]:
        return {prefix + key: float(value) for key, value in asdict(self).items()}


# --------------------------------------------------------------------------- worker process

def _picklable(result: tuple[Optional[bool], Any]) -> tuple[Optional[bool], Any]:
    """The result itself, or an error saying the env returned something that cannot leave the worker."""
    try:
        pickle.dumps(result)
        return result
    except Exception as exc:
        return False, f"the env returned an object that cannot be pickled: {type(exc).__name__}: {exc}"


class _MakeError(Exception):
    """The env could not be constructed: a configuration error, raised to the caller."""


def _worker_main(conn: Connection, spec: gym.envs.registration.EnvSpec, env_kwargs: dict[str, Any],
                 max_steps: Optional[int], current: Any, started_at: Any) -> None:
    """Serve batches of operations until told to stop. `current`/`started_at` let the parent time steps."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    from gigpo.envs.registry import register_builtin_envs

    register_builtin_envs()  # in this fresh interpreter

    envs: dict[int, gym.Env] = {}

    def make(episode: int) -> gym.Env:
        if episode not in envs:
            try:
                envs[episode] = gym.make(spec, max_episode_steps=max_steps, disable_env_checker=True, **env_kwargs)
            except Exception as exc:
                raise _MakeError(f"{type(exc).__name__}: {exc}") from exc
        return envs[episode]

    def run(kind: str, episode: int, arg: Any) -> Any:
        if kind == "reset":
            make(episode)
            observation, info = envs[episode].reset(seed=arg)
            base = envs[episode].unwrapped
            meta = (getattr(base, "task", ""), getattr(base, "task_type", ""),
                    getattr(base, "action_format", ""), getattr(base, "prompt_template", None))
            return observation, info, meta
        if kind == "step":
            return envs[episode].step(arg)
        if kind == "replay":
            seed, actions = arg
            make(episode).reset(seed=seed)
            for action in actions:
                envs[episode].step(action)
            return None
        if kind == "expert":
            expert = getattr(envs[episode].unwrapped, "expert_action", None)
            return expert() if expert is not None else None
        if kind == "probe":  # make one env and drop it: configuration errors surface now
            make(episode)
            envs.pop(episode).close()
            return None
        if kind == "drop":
            env = envs.pop(episode, None)
            if env is not None:
                env.close()
            return None
        raise ValueError(f"unknown pool operation {kind!r}")

    while True:
        try:
            batch = conn.recv()
        except EOFError:
            break
        if batch is None:
            break
        results = []
        for index, (kind, episode, arg) in enumerate(batch):
            current.value = index
            started_at.value = time.monotonic()
            try:
                results.append((True, run(kind, episode, arg)))
            except _MakeError as exc:  # the caller's configuration, not one episode's bad luck
                results.append((None, str(exc)))
            except Exception as exc:  # the env's fault, not the pool's: report it and go on
                results.append((False, f"{type(exc).__name__}: {exc}"))
        started_at.value = _IDLE
        current.value = -1
        try:
            conn.send(results)
        except (pickle.PicklingError, TypeError, AttributeError):  # pickling fails before anything is written
            conn.send([_picklable(result) for result in results])
    for env in envs.values():
        env.close()


@dataclass
class _Worker:
    process: Any
    conn: Connection
    current: Any
    started_at: Any


@dataclass
class _Episode:
    view: EpisodeView
    worker: int
    actions: list[str] = field(default_factory=list)
    """Raw action texts sent so far, for replay after a worker restart."""


def _stop_workers(workers: list[_Worker]) -> None:
    for worker in workers:
        try:
            worker.conn.send(None)
        except (OSError, ValueError):
            pass
    for worker in workers:
        worker.process.join(timeout=2.0)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.conn.close()
    workers.clear()


# --------------------------------------------------------------------------- the pool

class EnvPool:
    """Grouped, batched, fault-isolated episodes of one registered env across worker processes."""

    def __init__(self, env_id: str, env_kwargs: Optional[dict[str, Any]] = None, max_steps: Optional[int] = None,
                 workers: Optional[int] = None,
                 step_timeout_s: float = EnvConfig.model_fields["step_timeout_s"].default,
                 start_method: str = "spawn") -> None:
        workers = usable_cores() if workers is None else workers
        if workers < 1:
            raise ValueError(f"workers={workers} must be at least 1")
        if step_timeout_s <= 0:
            raise ValueError(f"step_timeout_s={step_timeout_s} must be positive")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be at least 1 (or None for the env's default)")
        from gigpo.envs.registry import env_spec

        self.env_id = env_id
        self._spec = env_spec(env_id)  # unknown ids fail here, with Gymnasium's "did you mean" hint
        self._env_kwargs = dict(env_kwargs or {})
        self.max_steps = max_steps
        self.step_timeout_s = float(step_timeout_s)
        self._ctx = mp.get_context(start_method)
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers)
        self._workers.extend(self._start_worker() for _ in range(workers))
        self._episodes: list[_Episode] = []
        self._stats = PoolStats()
        self._inflight: dict[int, list[_Op]] = {}
        """Worker -> the one batch sent to it and not yet answered."""
        self._queued: dict[int, list[_Op]] = {}
        """Worker -> submitted steps waiting for it to be free (async steps only)."""
        self._submitted: dict[int, int] = {}
        """Episode -> its step count when its async step was submitted; removed once `poll` reports it."""
        self._make_errors: list[str] = []

    # ------------------------------------------------------------------ public API
    @property
    def num_workers(self) -> int:
        return len(self._workers)

    def reset(self, seeds: list[int], group_size: int) -> list[EpisodeView]:
        """Start len(seeds) x group_size episodes; group g's members all reset from seeds[g]."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be at least 1")
        if not seeds or not all(isinstance(s, int) for s in seeds):
            raise ValueError(f"seeds={seeds!r} must be a non-empty list of ints (one per group)")
        count = len(seeds) * group_size
        ops: dict[int, list[_Op]] = {w: [] for w in range(self.num_workers)}
        for old in self._episodes[count:]:
            ops[old.worker].append(("drop", old.view.episode_idx, None))
        self._episodes = []
        for idx in range(count):
            seed = seeds[idx // group_size]
            view = EpisodeView.before_reset(idx, idx // group_size, seed)
            self._episodes.append(_Episode(view, idx % self.num_workers))
            ops[idx % self.num_workers].append(("reset", idx, seed))
        for (kind, idx, _), (ok, payload) in self._run(ops):
            if kind != "reset":
                continue
            episode = self._episodes[idx]
            if ok:
                observation, info, (task, task_type, action_format, template) = payload
                fresh = EpisodeView.before_reset(idx, episode.view.group_idx, episode.view.seed)
                episode.view = replace(fresh, observation=observation, info=info, task=task, task_type=task_type,
                                       action_format=action_format, prompt_template=template)
            else:
                self._end_with_error(episode, payload)
        self._stats.episodes += count
        return [episode.view for episode in self._episodes]

    def step(self, actions: dict[int, str]) -> list[EpisodeView]:
        """Apply one action text per listed live episode; return their new views in episode order."""
        ops: dict[int, list[_Op]] = {w: [] for w in range(self.num_workers)}
        for idx in sorted(actions):
            episode = self._live_episode(idx)
            if not isinstance(actions[idx], str):
                raise TypeError(f"action for episode {idx} must be str, got {type(actions[idx]).__name__}")
            ops[episode.worker].append(("step", idx, actions[idx]))
        for op, result in self._run(ops):
            self._apply_step(op, result)
        self._stats.steps += len(actions)
        return [self._episodes[idx].view for idx in sorted(actions)]

    def submit_step(self, idx: int, action: str) -> None:
        """Queue one action for live episode `idx` and return at once; `poll` reports the step when it ends."""
        episode = self._live_episode(idx)
        if idx in self._submitted:
            raise ValueError(f"episode {idx} already has a step in flight; poll for it before submitting another")
        if not isinstance(action, str):
            raise TypeError(f"action for episode {idx} must be str, got {type(action).__name__}")
        self._submitted[idx] = episode.view.step
        self._queued.setdefault(episode.worker, []).append(("step", idx, action))
        self._stats.steps += 1
        self._dispatch(episode.worker)

    def poll(self, timeout: Optional[float] = None, wake: Sequence[Any] = ()) -> list[EpisodeView]:
        """Views of submitted steps that have ended since the last poll, in episode order.

        Waits until at least one has ended, for at most `timeout` seconds (None: no limit), or until one
        of `wake` is ready (anything `multiprocessing.connection.wait` takes: a socket or connection the
        caller's other work signals on). Faults end only their episode, as in `step`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._submitted:
            for op, result in self._wait_some(None if deadline is None else max(0.0, deadline - time.monotonic()),
                                              wake):
                self._apply_step(op, result)
            for w in range(self.num_workers):
                self._dispatch(w)
            self._raise_make_errors()
            ended = sorted(idx for idx, step in self._submitted.items()
                           if self._episodes[idx].view.step > step or self._episodes[idx].view.done)
            for idx in ended:
                del self._submitted[idx]
            woken = bool(wake) and bool(wait(list(wake), timeout=0))
            if ended or woken or (deadline is not None and time.monotonic() >= deadline):
                return [self._episodes[idx].view for idx in ended]
        return []

    @property
    def steps_in_flight(self) -> int:
        """Submitted steps not yet reported by `poll`."""
        return len(self._submitted)

    def expert_actions(self, episode_idxs: Optional[list[int]] = None) -> dict[int, Optional[str]]:
        """The env's expert action for each live episode (None where the env has no expert or no answer)."""
        idxs = self.live_episodes() if episode_idxs is None else list(episode_idxs)
        ops: dict[int, list[_Op]] = {w: [] for w in range(self.num_workers)}
        for idx in idxs:
            ops[self._live_episode(idx).worker].append(("expert", idx, None))
        answers = {idx: payload if ok else None for (kind, idx, _), (ok, payload) in self._run(ops) if kind == "expert"}
        return {idx: answers[idx] for idx in idxs}  # in episode order, not in the order workers answered

    def check_make(self) -> None:
        """Make one env in a worker and close it; a configuration error (bad kwargs, missing data) raises
        ValueError now rather than at the first reset, which may come after a long phase (a warm-up)."""
        self._run({0: [("probe", -1, None)]})

    def episode(self, idx: int) -> EpisodeView:
        if not 0 <= idx < len(self._episodes):
            raise IndexError(f"episode {idx} does not exist (the pool holds {len(self._episodes)})")
        return self._episodes[idx].view

    @property
    def episodes(self) -> list[EpisodeView]:
        return [episode.view for episode in self._episodes]

    def live_episodes(self) -> list[int]:
        return [e.view.episode_idx for e in self._episodes if not e.view.done]

    def stats(self) -> PoolStats:
        return PoolStats(**asdict(self._stats))

    def worker_pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    def close(self) -> None:
        """Stop every worker process (idempotent)."""
        self._finalizer()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _start_worker(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe()
        current = self._ctx.RawValue("l", -1)
        started_at = self._ctx.RawValue("d", _IDLE)
        process = self._ctx.Process(
            target=_worker_main, name="gigpo-env-worker", daemon=True,
            args=(child_conn, self._spec, self._env_kwargs, self.max_steps, current, started_at))
        process.start()
        child_conn.close()
        return _Worker(process, parent_conn, current, started_at)

    def _live_episode(self, idx: int) -> _Episode:
        if not 0 <= idx < len(self._episodes):
            raise IndexError(f"episode {idx} does not exist (the pool holds {len(self._episodes)}); call reset first")
        episode = self._episodes[idx]
        if episode.view.done:
            raise ValueError(f"episode {idx} is done; step only the episodes in live_episodes()")
        return episode

    def _apply_step(self, op: _Op, result: tuple[Optional[bool], Any]) -> None:
        """Turn a worker's answer to a step into the episode's new view (or its end, on an env error)."""
        kind, idx, text = op
        ok, payload = result
        if kind != "step" or self._episodes[idx].view.done:
            return
        episode = self._episodes[idx]
        if not ok:
            self._end_with_error(episode, payload)
            return
        observation, reward, terminated, truncated, info = payload
        old = episode.view
        shown = info.get("action") or text.strip()[:_SHOWN_INVALID_CHARS]
        episode.actions.append(text)
        episode.view = replace(old, step=old.step + 1, observation=observation, reward=float(reward),
                               terminated=bool(terminated), truncated=bool(truncated), info=info,
                               history=old.history + ((old.observation, shown),))

    def _dispatch(self, w: int) -> None:
        """Send worker w its next queued step if it is free; steps of episodes ended meanwhile are dropped."""
        queue = self._queued.get(w)
        if w in self._inflight or not queue:
            return
        while queue and self._episodes[queue[0][1]].view.done:  # ended by a failed replay: poll reports it
            queue.pop(0)
        if queue:
            batch = [queue.pop(0)]
            self._workers[w].conn.send(batch)
            self._inflight[w] = batch

    def _raise_make_errors(self) -> None:
        if self._make_errors:
            first, self._make_errors = self._make_errors[0], []
            raise ValueError(f"cannot make {self.env_id!r} with env_kwargs={self._env_kwargs}: {first}")

    def _end_with_error(self, episode: _Episode, message: str, timed_out: bool = False) -> None:
        if episode.view.done:
            return
        if timed_out:
            self._stats.step_timeouts += 1
        else:
            self._stats.env_errors += 1
        old = episode.view
        info = {"anchor": old.info.get("anchor", old.observation), "admissible_actions": None, "action_valid": True,
                "invalid_reason": "", "won": False, "action": None, "error": message}
        episode.view = replace(old, reward=0.0, terminated=False, truncated=True, info=info)

    def _run(self, ops: dict[int, list[_Op]]) -> list[tuple[_Op, tuple[bool, Any]]]:
        """Send each worker its operations, wait for all, and recover workers that hang or die."""
        if self._submitted:
            raise RuntimeError(f"{len(self._submitted)} submitted steps are still in flight; poll() until "
                               "steps_in_flight is 0 before calling reset, step or expert_actions")
        for w, batch in ops.items():
            if batch:
                self._workers[w].conn.send(batch)
                self._inflight[w] = batch
        results: list[tuple[_Op, tuple[bool, Any]]] = []
        while self._inflight:
            results.extend(self._wait_some(None))
        self._raise_make_errors()
        return results

    def _wait_some(self, timeout: Optional[float], wake: Sequence[Any] = ()) -> list[tuple[_Op, tuple[bool, Any]]]:
        """Wait up to `timeout` s (at most one poll period) for answers from busy workers; restart those
        that hang or die. Returns the operations answered, with their results."""
        sent = self._inflight
        results: list[tuple[_Op, tuple[bool, Any]]] = []
        now = time.monotonic()
        deadlines = [self._workers[w].started_at.value + self.step_timeout_s for w in sent
                     if self._workers[w].started_at.value != _IDLE]
        limit = min([_POLL_S] + [max(0.0, d - now) for d in deadlines] + ([timeout] if timeout is not None else []))
        by_conn = {self._workers[w].conn: w for w in sent}
        for conn in wait(list(by_conn) + list(wake), timeout=limit):
            w = by_conn.get(conn)
            if w is None:  # one of the caller's wake objects
                continue
            try:
                replies = conn.recv()
            except (EOFError, OSError):
                self._recover(w, "the env worker process died")
                continue
            for op, (ok, payload) in zip(sent.pop(w), replies):
                if ok is None:
                    self._make_errors.append(payload)
                elif op[0] == "replay" and not ok:
                    self._end_with_error(self._episodes[op[1]], f"replay after a worker restart: {payload}")
                results.append((op, (ok, payload)))
        now = time.monotonic()
        for w in list(sent):
            worker = self._workers[w]
            started = worker.started_at.value
            if started != _IDLE and now - started > self.step_timeout_s:
                self._recover(w, f"exceeded step_timeout_s={self.step_timeout_s}", timed_out=True)
            elif not worker.process.is_alive() and not worker.conn.poll():
                self._recover(w, "the env worker process died")
        return results

    def _recover(self, w: int, reason: str, timed_out: bool = False) -> None:
        """Restart worker w, end the episode it was stuck on, rebuild its other episodes, resend the rest."""
        sent = self._inflight
        caller_ops = [op for op in sent[w] if op[0] != "replay"]  # replays are rebuilt below from the episodes
        worker = self._workers[w]
        worker.process.kill()  # first, so the operation index read next cannot move on
        worker.process.join()
        worker.conn.close()
        index = worker.current.value
        if not 0 <= index < len(sent[w]):
            raise RuntimeError(f"env worker for {self.env_id!r} failed before running any operation "
                               f"(exit code {worker.process.exitcode}); check that the env can be made in a "
                               f"fresh process (importable entry point, picklable kwargs)")
        kind, stuck, _ = sent[w][index]
        self._workers[w] = self._start_worker()
        self._stats.worker_restarts += 1
        if kind != "drop":  # a drop names an episode of the previous reset: nothing left to end
            self._end_with_error(self._episodes[stuck], f"{kind}: {reason}", timed_out=timed_out)

        # Episodes ended during this call (the stuck one, failed replays) are not run again; "drop"
        # names an episode of the previous reset, which is gone from self._episodes.
        remaining = [op for op in caller_ops if op[0] == "drop" or not self._episodes[op[1]].view.done]
        being_reset = {op[1] for op in remaining if op[0] in ("reset", "drop")}
        replays: list[_Op] = [("replay", e.view.episode_idx, (e.view.seed, list(e.actions)))
                              for e in self._episodes
                              if e.worker == w and not e.view.done and e.view.episode_idx not in being_reset]
        batch = replays + remaining
        sent[w] = batch
        if batch:
            self._workers[w].conn.send(batch)
        else:
            del sent[w]
