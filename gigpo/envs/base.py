"""The one class a user subclasses to add an environment: a Gymnasium env with text in and text out.

An agent environment owns its task instruction, its action format and its action parser. The
trainer only ever sees Gymnasium's API: `reset(seed=) -> (obs, info)` and
`step(text) -> (obs, reward, terminated, truncated, info)`, where `info` always carries:

    anchor              the state GiGPO groups steps by (default: the observation text)
    admissible_actions  list of valid action strings, or None when any parsed action is allowed
    action_valid        whether the model's text parsed into an admissible action
    invalid_reason      why not ("" when valid)
    won                 whether the task is solved
    action              the parsed action that was applied (None when invalid or after reset)

An invalid action does not advance the environment; the step reward is `-invalid_action_penalty`.
An action that is not text at all (None, a number, bytes, a list) is invalid in the same way.
Subclasses implement `_reset` and `_step` over already-validated actions.
"""
from __future__ import annotations

import re
import string
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gigpo.config import EnvConfig

MAX_TEXT_LENGTH = 65536
INVALID_ACTION_PENALTY: float = EnvConfig.model_fields["invalid_action_penalty"].default
"""env.invalid_action_penalty's default (gigpo.config), for an env made without a recipe (gymnasium.make, the
class itself); the trainer passes the recipe's value."""

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_THINK_PREFIX_RE = re.compile(r"^\s*(<think>.*?</think>)?\s*<action>", re.DOTALL)

#: What `sample()` draws from (check_env steps with samples): printable ASCII and some non-ASCII letters,
#: so a sampled action also tests an env's parser on text beyond ASCII.
SAMPLE_CHARSET = string.printable + "éèçàüößñøåæœ€—’“”…αβγπжшקع中文日本語한국어😀"


class UnicodeText(spaces.Text):
    """A Gymnasium text space holding any Unicode text up to `max_length` characters.

    Gymnasium's `Text` holds only the characters of its charset, and agents read and write any text
    ("café crème", product data in any language, emoji). The one exclusion: lone surrogates, which no
    UTF-8 file (records, logs) can hold.
    """

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, min_length: int = 0) -> None:
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str) or not self.min_length <= len(x) <= self.max_length:
            return False
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (isinstance(other, UnicodeText) and self.min_length == other.min_length
                and self.max_length == other.max_length)


def text_space(max_length: int = MAX_TEXT_LENGTH) -> UnicodeText:
    """The observation and action space of agent envs: any Unicode text."""
    return UnicodeText(max_length)


class UnfinishedResponse(str):
    """Model text that did not end (no end of turn or stop string within `rollout.max_new_tokens`).

    The rollout hands such text to `step` wrapped in this type; it is still a `str`, so any env takes
    it, but `AgentEnv.step` counts it as an invalid action whatever it contains: an answer that runs
    on until it is cut is not a choice the agent made, and rewarding its first tag teaches run-ons.
    """


def parse_tagged_action(text: str) -> tuple[Optional[str], str]:
    """`<think>...</think>` (optional) then `<action>X</action>` and nothing more -> (X, ""), else (None, reason).

    Text after the closing tag makes the answer invalid: a run-on answer would otherwise count as
    valid and its trailing tokens, trained on with the action's advantage, inflate the KL (issue 24).
    """
    if not _THINK_PREFIX_RE.match(text):
        if "<action>" not in text:
            return None, "no <action>...</action> tag"
        return None, "only <think>...</think> may come before <action>"
    match = _ACTION_RE.search(text)
    if match is None:
        return None, "unclosed <action> tag"
    action = match.group(1).strip()
    if not action:
        return None, "empty action"
    if text[match.end():].strip():
        return None, "text after </action>"
    return action, ""


class AgentEnv(gym.Env):
    """Base class of gigpo environments: text observations, free-text actions, GiGPO anchors."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    #: What the agent is asked to do; shown at the top of every prompt. Set in `_reset` if per-task.
    task: str = ""
    #: How the agent must phrase its answer; appended to every prompt.
    action_format: str = (
        "First reason inside <think> </think>, then give exactly one action inside <action> </action>."
    )
    #: A label for per-task-type metrics (e.g. ALFWorld's six task types); set in `_reset` if per-task.
    task_type: str = ""
    #: This env's prompt template (a format string, see gigpo.envs.prompt); None uses the default.
    prompt_template: Optional[str] = None
    #: The keyword argument that turns `expert_action()` on, when the expert is off by default (ALFWorld's
    #: `expert`): a warm-up on this env without it stops in its first state and names the setting.
    expert_kwarg: Optional[str] = None

    def __init__(self, invalid_action_penalty: float = INVALID_ACTION_PENALTY,
                 render_mode: Optional[str] = None) -> None:
        self.observation_space = text_space()
        self.action_space = text_space()
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.render_mode = render_mode
        self._observation = ""
        self._won = False

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        """Start a task using `self.np_random` (seeded by Gymnasium); return (observation, extra info)."""
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply a parsed, admissible action; return (observation, reward, terminated, extra info)."""
        raise NotImplementedError

    def admissible_actions(self) -> Optional[list[str]]:
        """Valid actions in the current state, or None if any parsed action is accepted."""
        return None

    def is_admissible(self, action: str) -> bool:
        """Whether a parsed action may be applied now. Default: `admissible_actions()` is None or lists it;
        override when the list shows a template (WebShop's `search[<your query>]` takes any words)."""
        allowed = self.admissible_actions()
        return allowed is None or action in allowed

    def anchor(self) -> str:
        """The state identity GiGPO groups by. Override when the display text is ambiguous."""
        return self._observation

    def parse_action(self, text: str) -> tuple[Optional[str], str]:
        """Model text -> (action, "") or (None, reason). Default: the first <action>...</action>."""
        return parse_tagged_action(text)

    def won(self) -> bool:
        return self._won

    def expert_action(self) -> Optional[str]:
        """An action an expert would take now (for demonstrations), or None if the env has no expert."""
        return None

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._won = False
        self._observation, extra = self._reset(options)
        return self._observation, self._info(True, "", None, extra)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):  # a caller's bug, yet the episode goes on as for any unparsable answer
            reason = f"the action must be text (str), not {type(action).__name__}"
            return self._observation, -self.invalid_action_penalty, False, False, self._info(False, reason, None, {})
        if isinstance(action, UnfinishedResponse):
            parsed, reason = None, "the answer did not end within rollout.max_new_tokens"
        else:
            parsed, reason = self.parse_action(action)
        if parsed is not None and not self.is_admissible(parsed):
            parsed, reason = None, f"{parsed!r} is not an admissible action"
        if parsed is None:
            return self._observation, -self.invalid_action_penalty, False, False, self._info(False, reason, None, {})
        self._observation, reward, terminated, extra = self._step(parsed)
        return self._observation, float(reward), bool(terminated), False, self._info(True, "", parsed, extra)

    def render(self) -> Optional[str]:
        return self._observation if self.render_mode == "ansi" else None

    def _info(self, valid: bool, reason: str, action: Optional[str], extra: dict[str, Any]) -> dict[str, Any]:
        info = {
            "action": action,
            "anchor": self.anchor(),
            "admissible_actions": self.admissible_actions(),
            "action_valid": valid,
            "invalid_reason": reason,
            "won": self.won(),
        }
        info.update(extra)
        return info


def rng_seed(rng: np.random.Generator) -> int:
    """A plain int drawn from Gymnasium's seeded generator, for libraries that want one."""
    return int(rng.integers(0, 2**31 - 1))
