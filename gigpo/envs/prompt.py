"""Turn an episode's current state into chat messages and prompt token ids.

The prompt holds the task, the step counter, the last K (observation, action) pairs, the current
observation, the admissible actions and the format instruction, rendered by a Python format string
with these fields:

    {task} {step} {max_steps} {history} {past_actions} {memory} {observation} {admissible_actions}
    {action_format}

`{history}`, `{past_actions}`, `{memory}` and `{admissible_actions}` are whole lines, or empty when there is
nothing to show. `{past_actions}` lists every action of the episode so far, oldest first, without their observations
(`history_length` does not cut it): a few tokens a step give a policy the memory a searching expert keeps
(which places it has already visited), where whole observations would fill the prompt. `{memory}` is the
env's own summary of what the agent has observed so far (`info["memory"]`, e.g. ALFWorld's `prompt: memory`:
places visited and not, what was seen where), empty for envs that keep none.
The template comes from the recipe (`env.prompt_template`) if set, else from the env's
`prompt_template` attribute, else `DEFAULT_TEMPLATE`. Prompts are short on purpose: on CPU, and for
small models, every token counts.

The messages then go through the tokenizer's chat template, or the one `chat_template` names
(gigpo.models.chat_template), or, with `chat_template="none"` for a base model, are written as plain text:
the system prompt and a blank line (when there is one), the user message, a newline.
"""
from __future__ import annotations

import string
from typing import Any, Optional, Sequence

from gigpo.config import EnvConfig
from gigpo.envs.pool import EpisodeView
from gigpo.models.chat_template import PLAIN_TEXT, fix_hint, load_template

PROMPT_CACHE_SIZE = 200_000
"""Distinct prompts kept tokenised; the cache starts over when full."""
FIELDS = ("task", "step", "max_steps", "history", "past_actions", "memory", "observation", "admissible_actions",
          "action_format")
DEFAULT_TEMPLATE = (
    "{task}\n"
    "{history}"
    "Step {step} of {max_steps}. Current observation:\n{observation}\n"
    "{admissible_actions}"
    "{action_format}"
)


def check_template(template: str) -> str:
    """Return `template` if it only uses known fields; else a ValueError naming the bad field."""
    try:
        used = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"prompt template {template!r} is not a valid format string: {exc}") from None
    for name in used:
        if name not in FIELDS:
            raise ValueError(f"prompt template field {{{name}}} is unknown; use any of "
                             f"{', '.join('{' + f + '}' for f in FIELDS)}")
    return template


def render_prompt(template: str, task: str, step: int, max_steps: int, observation: str,
                  history: Sequence[tuple[str, str]], history_length: int,
                  admissible_actions: Optional[Sequence[str]], action_format: str, memory: str = "") -> str:
    """The user message for one step; `step` is 1-based, `history` is oldest first, `memory` whole lines."""
    recent = list(history)[-history_length:] if history_length > 0 else []
    shown = ""
    if recent:
        shown = f"Last {len(recent)} step(s):\n" + "".join(
            f"Observation:\n{obs}\nAction: {action}\n" for obs, action in recent)
    past = f"Actions so far: {'; '.join(action for _, action in history)}\n" if history else ""
    actions = f"Admissible actions: {', '.join(admissible_actions)}\n" if admissible_actions else ""
    return template.format(task=task, step=step, max_steps=max_steps, history=shown, past_actions=past,
                           memory=memory, observation=observation, admissible_actions=actions, action_format=action_format)


def view_prompt(view: EpisodeView, max_steps: int, history_length: int, template: Optional[str] = None) -> str:
    """The user message for an episode view: `template`, else the env's, else `DEFAULT_TEMPLATE`."""
    template = template or (check_template(view.prompt_template) if view.prompt_template else DEFAULT_TEMPLATE)
    return render_prompt(template, view.task, view.step + 1, max_steps, view.observation, view.history,
                         history_length, view.admissible_actions, view.action_format,
                         memory=view.info.get("memory", ""))


def accepts_system_role(tokenizer: Any, chat_template: Optional[str] = None) -> bool:
    """Whether the chat template (the tokenizer's, or the Jinja text given) renders a system message
    (Gemma's own, for one, raises on it)."""
    marker = "gigpo-system-probe"
    probe = [{"role": "system", "content": marker}, {"role": "user", "content": "hello"}]
    try:
        text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True,
                                             chat_template=chat_template)
    except Exception:  # jinja2's TemplateError from the template's raise_exception, or a KeyError
        return False
    return marker in text  # some templates drop a system message without a word


class PromptBuilder:
    """Episode view -> chat messages -> token ids, through the tokenizer's chat template.

    `system`: None sends no system message, so the template's own default applies (SmolLM2's ChatML
    template inserts "You are a helpful AI assistant named SmolLM..."; Qwen's and the local models'
    insert nothing). A string is sent as the system message, or, when the template has no system
    role, put above the user message.

    `chat_template`: None uses the tokenizer's; a name or Jinja file (gigpo.models.chat_template) replaces
    it; "none" writes plain text for a base model (see the module docstring).
    """

    def __init__(self, tokenizer: Any, max_steps: int,
                 history_length: int = EnvConfig.model_fields["history_length"].default,
                 template: Optional[str] = None, system: Optional[str] = None,
                 chat_template: Optional[str] = None) -> None:
        if history_length < 0:
            raise ValueError(f"history_length={history_length} must be at least 0")
        self.plain_text = chat_template is not None and chat_template.strip().lower() == PLAIN_TEXT
        self.chat_template = load_template(chat_template) if chat_template is not None and not self.plain_text else None
        if not self.plain_text and self.chat_template is None and getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; " + fix_hint(getattr(tokenizer, "name_or_path", "")))
        self.tokenizer, self.max_steps, self.history_length = tokenizer, max_steps, history_length
        self.template = check_template(template) if template is not None else None
        self.system = system
        self._cache: dict[str, list[int]] = {}
        self.system_in_user = (system is not None and not self.plain_text
                               and not accepts_system_role(tokenizer, self.chat_template))

    def messages(self, view: EpisodeView) -> list[dict[str, str]]:
        user = view_prompt(view, self.max_steps, self.history_length, self.template)
        if self.system is None:
            return [{"role": "user", "content": user}]
        if self.system_in_user:
            return [{"role": "user", "content": f"{self.system}\n\n{user}" if self.system else user}]
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def render(self, turn: list[dict[str, str]]) -> str:
        """The prompt text of one turn's messages: through the chat template, or as plain text."""
        if self.plain_text:
            return "".join(m["content"] + ("\n\n" if m["role"] == "system" else "\n") for m in turn)
        return self.tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True,
                                                  chat_template=self.chat_template)

    def text(self, view: EpisodeView) -> str:
        return self.render(self.messages(view))

    def token_ids(self, view: EpisodeView) -> list[int]:
        # plain text gets the tokenizer's own BOS (a chat template writes it itself)
        return self.tokenizer(self.text(view), add_special_tokens=self.plain_text)["input_ids"]

    def batch_token_ids(self, views: Sequence[EpisodeView]) -> list[list[int]]:
        """Token ids for many episodes: each distinct user message is rendered through the chat template
        (a Jinja call) and tokenised once, then served from a cache, since states recur within and across
        groups; the misses go through one batched tokenizer call (fast tokenizers batch in Rust)."""
        messages = [self.messages(view) for view in views]
        keys = ["\x00".join(m["role"] + "\x01" + m["content"] for m in turn) for turn in messages]
        missing = {key: turn for key, turn in zip(keys, messages) if key not in self._cache}
        if missing:
            if len(self._cache) + len(missing) > PROMPT_CACHE_SIZE:
                self._cache.clear()
            texts = [self.render(turn) for turn in missing.values()]
            for key, ids in zip(missing, self.tokenizer(texts, add_special_tokens=self.plain_text)["input_ids"]):
                self._cache[key] = ids
        return [list(self._cache[key]) for key in keys]
