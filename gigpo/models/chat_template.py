"""Chat templates for models that come without one, and the check that finds them before training starts.

A GGUF file of a base model (or of some quantised uploads) has no `tokenizer.chat_template` field, so its
converted tokenizer has none either. Three ways on:

- `gigpo model convert FILE.gguf --chat-template NAME|FILE` writes one of the templates below (or a Jinja
  file) into the converted tokenizer; pick the family the model was trained with;
- `model.chat_template: NAME|FILE` in a recipe uses it for an already converted directory;
- `model.chat_template: none` renders prompts as plain text for a base model (gigpo.envs.prompt): the
  system prompt, a blank line, the user message and a newline. A base model rarely ends its answer with
  EOS, so such a recipe must also set `rollout.stop` (e.g. `["</action>"]`, kept in the output so the
  action still parses).

`gigpo config` and `gigpo train` run `check_model_template` while loading the recipe: a local model
directory whose tokenizer has no template fails in a second, naming these fixes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

PLAIN_TEXT = "none"
"""`model.chat_template: none`: no chat template; prompts are plain text (a base model)."""

# Written for gigpo from each family's published turn format (role markers and end-of-turn tokens).
_CHATML = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
_LLAMA3 = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim) + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)
# Mistral and Gemma have no system turn: a system message opens the first user turn instead.
_MISTRAL = (
    "{{- bos_token -}}"
    "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
    "{%- for message in messages if message['role'] != 'system' -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '[INST] ' + ((system + '\\n\\n') if loop.first and system else '') + message['content'] + ' [/INST]' -}}"
    "{%- else -%}{{- ' ' + message['content'] + eos_token -}}{%- endif -%}"
    "{%- endfor -%}"
)
_GEMMA = (
    "{{- bos_token -}}"
    "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
    "{%- for message in messages if message['role'] != 'system' -%}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' -}}"
    "{{- ((system + '\\n\\n') if loop.first and system else '') + (message['content'] | trim) + '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

TEMPLATES: dict[str, str] = {"chatml": _CHATML, "llama3": _LLAMA3, "mistral": _MISTRAL, "gemma": _GEMMA}
"""Named templates: ChatML (Qwen2/2.5, SmolLM/SmolLM2, many fine-tunes), Llama 3, Mistral [INST], Gemma."""
ALIASES: dict[str, str] = {"qwen2": "chatml", "qwen2.5": "chatml", "smollm": "chatml", "smollm2": "chatml",
                           "llama3.1": "llama3", "llama3.2": "llama3", "gemma2": "gemma"}
MARKERS: dict[str, tuple[str, ...]] = {
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama3": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "mistral": ("[INST]", "[/INST]"),
    "gemma": ("<start_of_turn>", "<end_of_turn>"),
}
"""The special tokens each template writes; a tokenizer without them was not trained on that format."""


def template_names() -> list[str]:
    return sorted([*TEMPLATES, *ALIASES])


def canonical_name(spec: str) -> Optional[str]:
    """The template name `spec` stands for (aliases resolved), or None when it is not a name."""
    name = spec.strip().lower()
    name = ALIASES.get(name, name)
    return name if name in TEMPLATES else None


def load_template(spec: str) -> str:
    """The Jinja text of a named template, or of a template file; a ValueError names both choices."""
    name = canonical_name(spec)
    if name is not None:
        return TEMPLATES[name]
    path = Path(spec).expanduser()
    if path.is_file():
        text = path.read_text()
        if "{{" not in text and "{%" not in text:
            raise ValueError(f"chat template file {path} holds no Jinja ({{{{ }}}} or {{% %}}); is it a template?")
        return text
    raise ValueError(f"chat template {spec!r} is neither a template name ({', '.join(template_names())}) nor a "
                     f"Jinja file that exists")


def missing_markers(tokenizer: Any, spec: str) -> list[str]:
    """Special tokens a named template writes that the tokenizer does not have as single tokens (they would
    be split into pieces the model never learned as turn boundaries); [] for files and known tokens."""
    name = canonical_name(spec)
    vocab = tokenizer.get_vocab()
    return [m for m in MARKERS.get(name, ()) if m not in vocab] if name else []


def saved_template(model_dir: Path) -> Optional[bool]:
    """Whether a saved tokenizer directory has a chat template (tokenizer_config.json's `chat_template`, or a
    chat_template.jinja/.json file beside it), read without loading anything; None when it is not a
    local model directory (a hub id, or a model gigpo builds or fetches itself)."""
    config_file = model_dir / "tokenizer_config.json"
    if not config_file.is_file():
        return None
    if (model_dir / "chat_template.jinja").is_file() or (model_dir / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads(config_file.read_text()).get("chat_template"))
    except (OSError, ValueError):
        return None  # unreadable here: the tokenizer loader will say why


def fix_hint(model: str) -> str:
    return (f"pick its family's template with model.chat_template=NAME ({', '.join(template_names())}) or a "
            f"Jinja file (model.chat_template=path/to/template.jinja), or convert it again with `gigpo model "
            f"convert FILE.gguf --chat-template NAME`; a base model with no chat format trains with "
            f"model.chat_template=none and rollout.stop (e.g. rollout.stop=['</action>']): see docs/config.md")


def check_model_template(path: Optional[str], chat_template: Optional[str]) -> None:
    """Fail before anything loads when `path` is a local model directory whose tokenizer has no chat template
    and the recipe names none; and when `chat_template` is neither `none`, a name nor a readable file."""
    if chat_template is not None:
        if chat_template.strip().lower() != PLAIN_TEXT:
            load_template(chat_template)
        return
    if path and saved_template(Path(path).expanduser()) is False:
        raise ValueError(f"model.path={path}: its tokenizer has no chat template, so prompts cannot be rendered; "
                         + fix_hint(path))
