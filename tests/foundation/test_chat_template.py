"""Models without a chat template: named templates render their family's turns, `gigpo model convert` warns
and takes --chat-template, `gigpo config`/`gigpo train` refuse a template-less directory before anything
loads (naming the fix), and a base model's prompts are plain text ending where rollout.stop says."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import gigpo.envs  # noqa: F401
from gigpo.config import RecipeError, load_config
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import PromptBuilder
from gigpo.models.chat_template import TEMPLATES, load_template, missing_markers, template_names
from gigpo.models.local import CHAT_TEMPLATE
from gigpo.models.pretrained import ChatTemplateWarning, convert_gguf
from support.gguf_file import write_tiny_gguf

REPO = Path(__file__).resolve().parents[2]
TURN = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go up. "}]


def gigpo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gigpo.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def bare_tokenizer(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = None
    return tokenizer


@pytest.fixture(scope="module")
def converted(tiny_model_dir, tmp_path_factory):
    """A template-less GGUF file converted by `gigpo model convert`, and by convert_gguf(chat_template="chatml")
    (in this process: the same code as --chat-template, without a second interpreter start)."""
    root = tmp_path_factory.mktemp("gguf")
    gguf = write_tiny_gguf(tiny_model_dir, root / "base.gguf", chat_template=None)
    bare = gigpo("model", "convert", str(gguf), "--out", str(root / "bare"), "--dtype", "fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChatTemplateWarning)  # a named template whose tokens exist: no warning
        convert_gguf(gguf, root / "chatml", "fp32", chat_template="chatml")
    return {"bare": (bare, root / "bare"), "chatml": root / "chatml"}


@pytest.mark.parametrize(("name", "want"), [
    ("chatml", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nGo up. <|im_end|>\n<|im_start|>assistant\n"),
    ("llama3", "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
               "<|end_header_id|>\n\nGo up.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("mistral", "[INST] Be brief.\n\nGo up.  [/INST]"),  # no system turn: it opens the first user turn
    ("gemma", "<start_of_turn>user\nBe brief.\n\nGo up.<end_of_turn>\n<start_of_turn>model\n"),
])
def test_named_templates_render_their_familys_turns(bare_tokenizer, name, want):
    # the tiny tokenizer has no BOS token, so no template writes one here
    assert bare_tokenizer.apply_chat_template(TURN, tokenize=False, add_generation_prompt=True,
                                              chat_template=load_template(name)) == want


def test_names_aliases_files_and_bad_names(bare_tokenizer, tmp_path):
    assert load_template("Qwen2.5") == load_template("smollm2") == TEMPLATES["chatml"]
    # the local models' own template (Qwen's ChatML) and gigpo's chatml write the same text
    assert bare_tokenizer.apply_chat_template(TURN, tokenize=False, chat_template=CHAT_TEMPLATE) == \
        bare_tokenizer.apply_chat_template(TURN, tokenize=False, chat_template=load_template("chatml"))
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert load_template(str(path)) == path.read_text()
    with pytest.raises(ValueError, match="neither a template name .*chatml.*llama3.* nor a Jinja file"):
        load_template("vicuna")
    assert missing_markers(bare_tokenizer, "chatml") == []  # the tiny tokenizer has ChatML's tokens
    assert missing_markers(bare_tokenizer, "llama3") == ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def test_convert_warns_without_a_template_and_writes_the_named_one(converted):
    proc, bare = converted["bare"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gigpo: warning: base.gguf has no chat template" in proc.stderr
    assert "--chat-template NAME" in proc.stderr and "model.chat_template=none" in proc.stderr
    assert not AutoTokenizer.from_pretrained(bare).chat_template
    chatml = converted["chatml"]
    tokenizer = AutoTokenizer.from_pretrained(chatml)
    assert tokenizer.chat_template == TEMPLATES["chatml"]
    # the template's end of turn is what generation stops at
    generation = json.loads((chatml / "generation_config.json").read_text())
    assert generation["eos_token_id"][0] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    bad = gigpo("model", "convert", "no.gguf", "--out", "x", "--chat-template", "vicuna")
    assert bad.returncode == 1 and "vicuna" in bad.stderr and "chatml" in bad.stderr and "Traceback" not in bad.stderr


def test_config_and_train_refuse_a_template_less_model_in_seconds_naming_the_fix(converted):
    _, bare = converted["bare"]
    chatml = converted["chatml"]
    source = ["model.init=null", f"model.path={bare}"]
    for command in ("config", "train"):
        start = time.monotonic()
        proc = gigpo(command, "recipes/sokoban_tiny.yaml", *source)
        took = time.monotonic() - start
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "its tokenizer has no chat template" in proc.stderr and "model.chat_template=NAME" in proc.stderr
        assert "Traceback" not in proc.stderr
        print(f"gigpo {command} refused the template-less model in {took:.1f} s")  # seconds: no model loaded
    assert gigpo("config", "recipes/sokoban_tiny.yaml", "model.init=null", f"model.path={chatml}").returncode == 0
    fixed = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*source, "model.chat_template=chatml"])
    assert fixed.model.chat_template == "chatml"
    plain = load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*source, "model.chat_template=none"])
    assert plain.rollout.stop == ["</action>"]  # the default stop string ends a plain-text answer
    with pytest.raises(RecipeError, match="needs rollout.stop"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*source, "model.chat_template=none", "rollout.stop=[]"])
    with pytest.raises(RecipeError, match="neither a template name"):
        load_config(REPO / "recipes" / "sokoban_tiny.yaml", [*source, "model.chat_template=vicuna"])


def test_plain_text_prompts_for_a_base_model(bare_tokenizer):
    with EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=1) as pool:
        [view] = pool.reset([3], group_size=1)
    with pytest.raises(ValueError, match="no chat template.*model.chat_template=none"):
        PromptBuilder(bare_tokenizer, 15)
    plain = PromptBuilder(bare_tokenizer, 15, system="Be brief.", chat_template="none")
    [system, user] = plain.messages(view)
    assert plain.text(view) == f"Be brief.\n\n{user['content']}\n"
    assert plain.token_ids(view) == bare_tokenizer(plain.text(view))["input_ids"]
    assert plain.batch_token_ids([view, view]) == [plain.token_ids(view)] * 2
    named = PromptBuilder(bare_tokenizer, 15, chat_template="chatml")
    assert named.text(view).startswith("<|im_start|>user\n") and named.text(view).endswith("<|im_start|>assistant\n")


def test_a_base_model_trains_on_plain_text_prompts(converted, tmp_path):
    """The documented base-model path, end to end: no template at all, plain-text prompts, rollout.stop."""
    from support.run import metrics_of, train  # the shrunk sokoban_tiny run of the trainer tests

    _, bare = converted["bare"]
    run = tmp_path / "plain"
    train(run, "model.init=null", f"model.path={bare}", "model.chat_template=none", "rollout.stop=['</action>']",
          "trainer.iterations=1")
    [_, first] = metrics_of(run)
    assert first["actor/optimizer_steps"] >= 1 and first["rollout/env_steps"] > 0
