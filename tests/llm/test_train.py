"""The full agent prompt (task, step, admissible actions, format) through the real model's chat template, as a
training run on Sokoban sends it. The real model's training run itself (an iteration through vLLM with verified
sync, a checkpoint that loads in plain transformers) is tests/llm/test_alfworld_recipe.py's: one SmolLM2 + vLLM +
DeepSpeed stack for both."""
from __future__ import annotations

from gigpo.config import load_config
from gigpo.envs.pool import EnvPool
from gigpo.trainer.setup import build_prompt_fn
from support.run import REPO

from .conftest import NAME

SMOLLM_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM"
RUN = [f"model.path={NAME}", "env.prompt_template=null", "env.history_length=1", "env.max_steps=2",
       "rollout.backend=vllm", "rollout.max_new_tokens=16", "rollout.max_prompt_tokens=512"]
"""Sokoban's full agent prompt (the env's own template, one step of history) within 512 prompt tokens."""


def test_full_agent_prompt_through_the_chat_template(smollm2_dir, smollm2_tokenizer):
    """What a training run with RUN sends: task, step, admissible actions and format, in SmolLM2's ChatML."""
    config = load_config(REPO / "recipes" / "sokoban_tiny.yaml", RUN)
    with EnvPool(config.env.id, env_kwargs=config.env.kwargs, max_steps=config.env.max_steps, workers=1) as pool:
        [view] = pool.reset([0], group_size=1)
    [ids] = build_prompt_fn(config, smollm2_tokenizer)([view])
    text = smollm2_tokenizer.decode(ids)
    assert text.startswith(f"<|im_start|>system\n{SMOLLM_DEFAULT_SYSTEM}")  # the template's own default
    assert f"<|im_start|>user\n{view.task}" in text and "Admissible actions: up, down, left, right" in text
    assert view.action_format in text and text.endswith("<|im_start|>assistant\n")
    assert len(ids) <= config.rollout.max_prompt_tokens
    ours = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*RUN, "env.system_prompt=Answer with one action."])
    [ids] = build_prompt_fn(ours, smollm2_tokenizer)([view])
    text = smollm2_tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nAnswer with one action.<|im_end|>\n")
    assert SMOLLM_DEFAULT_SYSTEM not in text  # replaced, not added to
