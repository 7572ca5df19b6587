"""Observations and actions in any Unicode text: the env check, Gymnasium's checker, the pool, the prompt,
and a real training run's records as `gigpo view` exports them."""
from __future__ import annotations

import base64
import gzip
import json
import os
import warnings
from pathlib import Path

import gymnasium as gym
from transformers import AutoTokenizer

from envs.unicode_env import DRINKS
from gigpo.cli import main
from gigpo.envs import EnvPool, text_space
from gigpo.envs.prompt import PromptBuilder
from support.run import clean_env
from support.zygote import run_cli

CAFE = "envs.unicode_env:unicode/Cafe-v0"


def test_the_text_space_holds_any_unicode_and_nothing_else() -> None:
    space = text_space()
    for text in ("", "café crème", "thé vert 🍵", "日本茶\nこんにちは", "tab\there", "x" * 65536):
        assert text in space, text
    for other in ("x" * 65537, "\ud800 lone surrogate", b"cafe", 42, None):
        assert other not in space, other
    space.seed(0)
    samples = [space.sample() for _ in range(20)]
    assert all(s in space for s in samples) and any(not s.isascii() for s in samples)


def test_envs_check_passes_on_a_non_ascii_env_and_it_runs_without_warnings(capsys) -> None:
    assert main(["envs", "check", CAFE]) == 0
    captured = capsys.readouterr()
    assert f"{CAFE}: check_env passed" in captured.out and captured.err == ""
    env = gym.make(CAFE, max_episode_steps=5)  # with Gymnasium's passive checker, which warns on every step
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        observation, info = env.reset(seed=0)
        assert observation.startswith("Boisson du jour : ") and info["anchor"] == observation
        drink = env.unwrapped.expert_action()
        observation, reward, terminated, truncated, info = env.step(f"<action>{drink}</action>")
        assert info["action_valid"] and info["action"] == drink and observation == f"Vous avez choisi {drink} — confirmez-vous ?"
        observation, reward, terminated, truncated, info = env.step("<think>c'est ça</think><action>oui</action>")
        assert terminated and info["won"] and reward == 10.0 and observation.endswith("☕")


def test_a_failed_check_is_one_line_naming_the_env_and_the_fault(capsys) -> None:
    assert main(["envs", "check", "envs.unicode_env:unicode/NotText-v0"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "envs.unicode_env:unicode/NotText-v0 failed" in err and "not within the observation space" in err
    for args, fault in ((["envs", "check", CAFE, "--kwargs", '{"colour": 1}'], "colour"),
                        (["envs", "check", "no_such_module:unicode/Cafe-v0"], "no_such_module")):
        assert main(args) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and fault in err, err


def test_non_ascii_episodes_through_the_pool_and_the_prompt(tiny_model_dir) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    builder = PromptBuilder(tokenizer, max_steps=4, history_length=2)
    with EnvPool(CAFE, max_steps=4, workers=1) as pool:
        views = pool.reset([3], group_size=2)
        wanted = pool.expert_actions()[0]
        assert wanted in DRINKS and views[0].task == "Commandez la boisson du jour au café « Chez Zoé »."
        other = next(d for d in DRINKS if d != wanted)
        stepped = pool.step({0: f"<action>{wanted}</action>", 1: f"<action>{other}</action>"})
        assert [v.info["action"] for v in stepped] == [wanted, other]
        assert stepped[1].observation == f"Vous avez choisi {other} — confirmez-vous ?"
        done = pool.step({0: "<action>oui</action>", 1: "<action>oui</action>"})
        assert [v.won for v in done] == [True, False] and done[0].observation == f"Merci ! Voici votre {wanted} ☕"
        user = builder.messages(done[1])[0]["content"]
        assert user.startswith("Commandez la boisson du jour") and f"Action: {other}\n" in user
        assert "Admissible actions: oui, non\n" in user
        ids = builder.token_ids(done[1])
        assert tokenizer.decode(ids) == builder.text(done[1])  # byte-level BPE: every character survives
        assert f"Merci ! Voici votre {other} ☕" in tokenizer.decode(ids)


def test_a_training_run_records_non_ascii_text_and_gigpo_view_exports_it(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parents[1]  # envs.unicode_env is importable from here
    env = {**clean_env(), "PYTHONPATH": os.pathsep.join([str(tests), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    recipe = tmp_path / "cafe.yaml"
    recipe.write_text(f"""model: {{init: tiny, dtype: fp32}}
rollout: {{backend: hf, max_prompt_tokens: 384, max_new_tokens: 8}}
env: {{id: "{CAFE}", max_steps: 2, num_groups: 2, group_size: 2, eval_episodes: 2, workers: 1}}
trainer: {{iterations: 1, micro_token_budget: 2048, mini_batch_size: 64, run_dir: {tmp_path / "run"}}}
logging: {{wandb_mode: disabled, progress: false, rollouts_every: 1}}
""")
    for args in (["train", str(recipe)], ["view", str(tmp_path / "run"), "--export", str(tmp_path / "view.html")]):
        proc = run_cli(args, cwd=tmp_path, env=env, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "record of iteration" not in proc.stdout  # a record that failed to write says so and goes on
    html = (tmp_path / "view.html").read_text(encoding="utf-8")
    bundle = json.loads(html.split('<script id="gigpo-bundle" type="application/json">')[1].split("</script>")[0])
    assert sorted(bundle["records"]) == ["000000-eval", "000001-eval", "000001-train"]  # the start's evaluation too
    for name, data in bundle["records"].items():  # what the page decodes: gzip, then UTF-8 JSON lines
        stored = (tmp_path / "run" / "records" / f"{name}.jsonl.gz").read_bytes()
        assert base64.b64decode(data) == stored
        lines = [json.loads(line) for line in gzip.decompress(stored).decode("utf-8").splitlines()]
        observations = [step["obs"] for traj in lines[1:] for step in traj["steps"]]
        assert observations and all(obs.startswith("Boisson du jour : ") for obs in observations)
        assert any("café crème" in obs and "thé vert 🍵" in obs and "日本茶" in obs for obs in observations)
