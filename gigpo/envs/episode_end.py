"""Refuse a step after the episode is over, whoever ended it: the env (terminated) or Gymnasium's TimeLimit
(truncated). TimeLimit only flags truncation and keeps stepping the inner env, so without this wrapper a
truncated WebShop episode could still click Buy Now and be paid.

`gigpo.envs.registry` registers every gigpo env with this wrapper, so `gym.make` (and the pool) apply it
outside the TimeLimit:

    >>> import gymnasium as gym, gigpo.envs
    >>> env = gym.make("gigpo/Maze-v0", max_episode_steps=1)
    >>> _ = env.reset(seed=0)
    >>> env.step("<action>up</action>")[3]   # truncated
    True
    >>> env.step("<action>up</action>")
    Traceback (most recent call last):
    ...
    gigpo.envs.episode_end.EpisodeOverError: the episode was truncated after 1 step(s); call reset() before stepping again
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

WRAPPER_SPEC = WrapperSpec("EpisodeEndGuard", "gigpo.envs.episode_end:EpisodeEndGuard", kwargs={})
"""What `gym.register(..., additional_wrappers=(WRAPPER_SPEC,))` needs to apply the guard in `gym.make`."""


class EpisodeOverError(RuntimeError):
    """A step after the episode terminated or was truncated: call reset() to start the next one."""


class EpisodeEndGuard(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Raises EpisodeOverError on a step after terminated or truncated, until the next reset."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._ended, self._steps = "", 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[Any, dict[str, Any]]:
        self._ended, self._steps = "", 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._ended:
            raise EpisodeOverError(f"the episode was {self._ended} after {self._steps} step(s); call reset() "
                                   f"before stepping again")
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        self._ended = "terminated" if terminated else "truncated" if truncated else ""
        return observation, reward, terminated, truncated, info
