"""A user's own env, in a folder outside the project reachable only through PYTHONPATH, trained by `gigpo train`.

The recipe names it the Gymnasium way, `module:Id`: the recipe check, the spawned env workers, evaluation,
the rollout records, `gigpo view` and `gigpo compare`'s report all find it from that id alone.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.run import clean_env
from support.zygote import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "guess_number.py"
ENV_ID = "guess_number:examples/GuessNumber-v0"
DOCS = ROOT / "docs" / "envs.md"
#: The docs' settings shrunk to the cheapest run that still plays, updates, evaluates and records.
SHRINK = ["env.max_steps=3", "env.num_groups=2", "env.group_size=2", "env.eval_episodes=2", "env.workers=1",
          "rollout.max_new_tokens=8", "trainer.iterations=2", "trainer.eval_every=1", "trainer.micro_token_budget=2048",
          "trainer.mini_batch_size=64", "logging.wandb_mode=disabled", "logging.progress=false",
          "logging.rollouts_every=1",
          "algorithm.gamma=0.9", "algorithm.episode_stats=steps"]  # not the defaults: `gigpo advantage` reads them back


def docs_recipe() -> str:
    """The recipe docs/envs.md's "Train it" section shows."""
    section = DOCS.read_text().split("\n## Train it\n", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def user_env(tmp_path: Path) -> dict[str, str]:
    """The docs' example env copied into its own folder; a process environment with it on PYTHONPATH."""
    folder = tmp_path / "my_envs"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / EXAMPLE.name)
    # only the user's folder is added: gigpo itself comes from however this test process found it
    paths = [str(folder), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**clean_env(), "PYTHONPATH": os.pathsep.join(paths)}  # no rank variables an in-process engine test left


def gigpo(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = run_cli(list(args), cwd=cwd, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_gigpo_train_runs_an_env_from_the_users_module(tmp_path: Path) -> None:
    env = user_env(tmp_path)
    work = tmp_path / "work"  # neither the project nor the env's folder: the env is found through PYTHONPATH only
    work.mkdir()
    (work / "guess.yaml").write_text(docs_recipe())
    assert f"id: {ENV_ID}" in gigpo(work, env, "config", "guess.yaml").stdout  # the docs' recipe as it stands

    run = work / "cmp" / "gigpo-s0"  # where `gigpo compare --out cmp` keeps seed 0 of gigpo
    gigpo(work, env, "train", "guess.yaml", *SHRINK, f"trainer.run_dir={run}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows][-2:] == [1, 2]
    for row in rows[-2:]:  # both iterations played the env in the workers, updated and evaluated
        assert row["rollout/episodes"] == 4 and row["rollout/env_steps"] >= 4 and "eval/success" in row
        assert "loss/entropy" in row
    observations = set()
    for record in sorted((run / "records").glob("*.jsonl.gz")):
        with gzip.open(record, "rt", encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        assert lines[0]["env"] == ENV_ID
        observations |= {step["obs"] for traj in lines[1:] for step in traj["steps"]}
    assert "No guess yet." in observations  # the example env's own first observation

    # the real run's train record scored again by `gigpo advantage`, with the options its header names, gives
    # the advantages its update used
    record = run / "records" / "000002-train.jsonl.gz"
    with gzip.open(record, "rt", encoding="utf-8") as f:
        _, *trajs = [json.loads(line) for line in f]
    scoring = gigpo(work, env, "advantage", "--input", str(record), "--output", "adv.jsonl")
    assert "estimator=gigpo gamma=0.9 step_weight=1.0 norm=std episode_stats=steps" in scoring.stderr
    scored = [json.loads(line)["advantage"] for line in (work / "adv.jsonl").read_text().splitlines()]
    recorded = [step["adv"] for traj in trajs for step in traj["steps"]]
    assert len(scored) == len(recorded) > 0
    assert max(abs(a - b) for a, b in zip(scored, recorded)) <= 5e-7 + 1e-12  # the record keeps 6 decimals

    html = work / "view.html"
    records = sorted(p.name.split(".")[0] for p in (run / "records").glob("*.jsonl.gz"))
    assert records == ["000000-eval", "000001-eval", "000001-train", "000002-eval", "000002-train"], records
    assert f"{len(records)} records" in gigpo(work, env, "view", str(run), "--export", str(html)).stdout
    assert ENV_ID in html.read_text()

    # `gigpo compare` validates the recipe, skips the finished run and reads every run's config.yaml back
    # (task-seed check): each imports the user's module from the id
    shutil.copytree(run, work / "cmp" / "grpo-s0")
    out = gigpo(work, env, "compare", "guess.yaml", *SHRINK, "--algos", "gigpo,grpo", "--seeds", "1", "--out", "cmp")
    assert "2/2 runs already done" in out.stdout
    assert "every algorithm draws the same task seeds" in (work / "cmp" / "report.md").read_text()


def test_an_id_whose_module_cannot_be_imported_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "guess.yaml").write_text(docs_recipe())
    proc = subprocess.run([sys.executable, "-m", "gigpo", "config", "guess.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # the env's folder is not on PYTHONPATH here
    assert proc.returncode == 2
    assert "importing module 'guess_number'" in proc.stderr and "PYTHONPATH" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_installed_packages_entry_point_names_an_env_for_recipes_and_workers(tmp_path: Path, monkeypatch,
                                                                                 capsys) -> None:
    """A package that declares `"mypkg/Guess-v0" = "guess_pkg.envs:GuessNumberEnv"` in the gigpo.envs group:
    its id alone passes the recipe check (kwargs checked against the class) and plays in the spawned workers."""
    from gigpo.cli import main
    from gigpo.config import RecipeError, build_config
    from gigpo.envs import EnvPool

    package = tmp_path / "site" / "guess_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    # the example's class, without its own registration: the entry point is the only way to the id
    (package / "envs.py").write_text(EXAMPLE.read_text().split("\nregister_env(")[0] + "\n")
    info = tmp_path / "site" / "guess_pkg-0.1.dist-info"  # what pip leaves for an installed package
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: guess-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text('[gigpo.envs]\nmypkg/Guess-v0 = guess_pkg.envs:GuessNumberEnv\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    config = build_config({"model": {"init": "tiny"}, "env": {"id": "mypkg/Guess-v0", "kwargs": {"invalid_action_penalty": 0.5}}})
    assert config.env.id == "mypkg/Guess-v0"
    with pytest.raises(RecipeError, match="unknown argument.*sizes"):
        build_config({"model": {"init": "tiny"}, "env": {"id": "mypkg/Guess-v0", "kwargs": {"sizes": 3}}})
    with EnvPool("mypkg/Guess-v0", max_steps=9, workers=1) as pool:
        pool.reset([0], group_size=1)
        while pool.live_episodes():
            pool.step({i: f"<action>{a}</action>" for i, a in pool.expert_actions().items()})
        assert pool.episode(0).won and pool.episode(0).observation.endswith("is correct.")
    assert main(["envs", "list"]) == 0 and "mypkg/Guess-v0" in capsys.readouterr().out.split()
