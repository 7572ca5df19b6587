"""Prompt builder: the right pieces, only the last K steps, templates overridable, real chat template."""
from __future__ import annotations

import pytest
from transformers import AutoTokenizer

import gigpo.envs  # noqa: F401
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import DEFAULT_TEMPLATE, PromptBuilder, check_template


@pytest.fixture(scope="module")
def sokoban_views():
    """Episode 0 after three steps (one invalid) and episode 1 fresh, from a real pool."""
    with EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=1) as pool:
        pool.reset([3], group_size=2)
        observations = [pool.episode(0).observation]
        for text in ("<action>up</action>", "bad", "<action>left</action>"):
            observations.append(pool.step({0: text})[0].observation)
        return pool.episode(0), pool.episode(1), observations


def test_prompt_shows_task_counter_last_k_steps_actions_and_format(tiny_model_dir, sokoban_views):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    stepped, fresh, observations = sokoban_views
    builder = PromptBuilder(tokenizer, max_steps=15, history_length=2)
    [message] = builder.messages(stepped)
    user = message["content"]
    assert message["role"] == "user" and user.startswith(stepped.task)
    assert "Step 4 of 15." in user and "Last 2 step(s):" in user
    assert f"Observation:\n{observations[1]}\nAction: bad\n" in user  # invalid text is shown as written
    assert f"Observation:\n{observations[2]}\nAction: left\n" in user
    assert "Action: up" not in user  # older than K=2
    assert user.endswith(f"Current observation:\n{observations[3]}\n"
                         f"Admissible actions: up, down, left, right\n{stepped.action_format}")
    assert "Last" not in builder.messages(fresh)[0]["content"]  # nothing to show at step 1
    ids = builder.token_ids(stepped)
    assert tokenizer.decode(ids) == builder.text(stepped)
    assert builder.text(stepped).endswith("<|im_start|>assistant\n")
    batch = builder.batch_token_ids([stepped, fresh, stepped])
    assert batch[0] == batch[2] == ids and batch[1] == builder.token_ids(fresh)
    batch[0].append(7)  # callers may edit what they get (rollout cuts long prompts): the cache must not change
    assert builder.batch_token_ids([fresh, stepped]) == [builder.token_ids(fresh), ids]
    assert len(ids) < 400, f"a Sokoban prompt should stay short for small models, got {len(ids)} tokens"


def test_templates_recipe_over_env_over_default(tiny_model_dir, sokoban_views):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    stepped, _, observations = sokoban_views
    from dataclasses import replace
    env_templated = replace(stepped, prompt_template="ENV {observation}")
    assert PromptBuilder(tokenizer, 15).messages(env_templated)[0]["content"] == f"ENV {observations[3]}"
    recipe = PromptBuilder(tokenizer, 15, history_length=0, template="{step}/{max_steps}:{history}{observation}")
    assert recipe.messages(env_templated)[0]["content"] == f"4/15:{observations[3]}"
    system = PromptBuilder(tokenizer, 15, system="Be brief.").messages(stepped)
    assert system[0] == {"role": "system", "content": "Be brief."}
    assert check_template(DEFAULT_TEMPLATE) == DEFAULT_TEMPLATE
    with pytest.raises(ValueError, match=r"\{obs\} is unknown"):
        PromptBuilder(tokenizer, 15, template="{obs}")



def test_past_actions_lists_every_action_so_far_whatever_the_history_length(tiny_model_dir, sokoban_views):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    stepped, fresh, observations = sokoban_views
    builder = PromptBuilder(tokenizer, 15, history_length=0, template="{past_actions}{observation}")
    # all three steps, oldest first and as written (the refused "bad" too), though history_length is 0
    assert builder.messages(stepped)[0]["content"] == f"Actions so far: up; bad; left\n{observations[3]}"
    assert builder.messages(fresh)[0]["content"] == fresh.observation  # nothing done yet: no line at all

# A Gemma-style template: no system role, it raises on one.
NO_SYSTEM_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_system_prompt_with_and_without_a_system_role(tiny_model_dir, sokoban_views):
    stepped, _, _ = sokoban_views
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    [user] = PromptBuilder(tokenizer, 15).messages(stepped)  # no system prompt: the template's own default
    with_role = PromptBuilder(tokenizer, 15, system="Answer with one action.")
    assert not with_role.system_in_user
    assert with_role.messages(stepped) == [{"role": "system", "content": "Answer with one action."}, user]
    assert with_role.text(stepped).startswith("<|im_start|>system\nAnswer with one action.<|im_end|>\n")

    tokenizer.chat_template = NO_SYSTEM_TEMPLATE
    with pytest.raises(Exception, match="System role not supported"):  # what a naive builder would hit
        tokenizer.apply_chat_template(with_role.messages(stepped), tokenize=False)
    folded = PromptBuilder(tokenizer, 15, system="Answer with one action.")
    assert folded.system_in_user
    [message] = folded.messages(stepped)
    assert message == {"role": "user", "content": "Answer with one action.\n\n" + user["content"]}
    assert folded.text(stepped).startswith("<|im_start|>user\nAnswer with one action.\n\n" + stepped.task)
    assert PromptBuilder(tokenizer, 15).messages(stepped) == [user]  # nothing to fold
