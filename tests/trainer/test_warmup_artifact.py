"""A warm-up saved once as an artifact (`gigpo warmup`, trainer.sft_artifact): its digest, and runs that refuse
any other weights (issue 55 item 1: pairs on different machines must start from the same policy)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gigpo.config import RecipeError, load_config
from gigpo.experiments.compare import artifact_check, run_dir_for, warmup_digest
from gigpo.trainer.warmup_artifact import DIGEST_FILE, artifact_sha256, install_artifact
from support.run import REPO, SMALL, WARM, clean_env
from support.zygote import run_cli


def test_digest_covers_every_file_by_name_and_content_and_not_the_folders_place(tmp_path: Path) -> None:
    a = tmp_path / "a"
    (a / "sub").mkdir(parents=True)
    (a / "config.json").write_text("{}")
    (a / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (a / "sub" / "tokenizer.json").write_text('{"v": 1}')
    digest = artifact_sha256(a)
    copy = shutil.copytree(a, tmp_path / "elsewhere" / "b")
    (copy / DIGEST_FILE).write_text(digest)  # the digest file itself is not hashed
    assert artifact_sha256(copy) == digest
    (copy / "sub" / "tokenizer.json").write_text('{"v": 2}')  # same weights, another tokenizer
    assert artifact_sha256(copy) != digest
    (copy / "sub" / "tokenizer.json").write_text('{"v": 1}')
    (copy / "model.safetensors").rename(copy / "model2.safetensors")  # same bytes under another name
    assert artifact_sha256(copy) != digest
    with pytest.raises(RecipeError, match="no files"):
        artifact_sha256(tmp_path / "empty")


def test_the_recipe_names_both_folder_and_a_real_digest() -> None:
    with pytest.raises(RecipeError, match="go together"):
        load_config(REPO / "recipes/sokoban_tiny.yaml", ["trainer.sft_artifact=some/folder"])
    with pytest.raises(RecipeError, match="not a sha256"):
        load_config(REPO / "recipes/sokoban_tiny.yaml", ["trainer.sft_artifact=x", "trainer.sft_artifact_sha256=abc"])


def test_gigpo_warmup_saves_an_artifact_that_train_takes_and_a_wrong_digest_stops_the_run(tmp_path: Path) -> None:
    """The artifact is the recipe's own cached warm-up; a run installs it byte for byte (its warm-up digest, the
    one `gigpo compare` pairs by, equals the artifact's weights); a digest that does not match stops `gigpo train`
    with exit code 2 before any engine, naming both digests."""
    art = tmp_path / "art"
    settings = [*SMALL, *WARM]
    made = run_cli(["warmup", "recipes/sokoban_tiny.yaml", *settings, "--out", str(art)], cwd=REPO, env=clean_env(),
                   timeout=300)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    digest = (art / DIGEST_FILE).read_text().strip()
    assert digest == artifact_sha256(art) and f"sft_artifact_sha256: {digest}" in made.stdout
    again = run_cli(["warmup", "recipes/sokoban_tiny.yaml", *settings, "--out", str(art)], cwd=REPO, env=clean_env(),
                    timeout=300)
    assert again.returncode == 2 and "written once" in again.stderr  # never overwritten

    run = tmp_path / "run"
    installed = install_artifact(str(art), digest, run / "warmup")
    assert artifact_sha256(installed) == digest and not (installed / DIGEST_FILE).exists()
    assert warmup_digest(run) == warmup_digest_of(art)

    wrong = "f" * 64
    refused = run_cli(["train", "recipes/sokoban_tiny.yaml", *settings, f"trainer.run_dir={tmp_path / 'refused'}",
                       f"trainer.sft_artifact={art}", f"trainer.sft_artifact_sha256={wrong}"],
                      cwd=REPO, env=clean_env(), timeout=300)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-3000:]
    assert digest in refused.stderr and wrong in refused.stderr
    assert not (tmp_path / "refused" / "checkpoints").exists() and "iteration" not in refused.stdout


def warmup_digest_of(artifact: Path) -> str:
    """compare's warm-up digest of a run whose warm-up is this folder."""
    fake = artifact.parent / "fake-run"
    (fake / "warmup").mkdir(parents=True)
    (fake / "warmup" / "hf").symlink_to(artifact)
    return warmup_digest(fake)


def test_compare_reports_the_artifact_the_runs_named(tmp_path: Path) -> None:
    def write(algo: str, seed: int, folder, digest) -> None:
        run = run_dir_for(tmp_path, algo, seed)
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump({"trainer": {"sft_artifact": folder,
                                                                    "sft_artifact_sha256": digest}}))

    assert artifact_check(tmp_path, ["gigpo"], [0]) is None  # no run yet
    for algo in ("gigpo", "grpo"):
        for seed in (0, 1):
            write(algo, seed, "warmups/w1", "ab" * 32)
    assert artifact_check(tmp_path, ["gigpo", "grpo"], [0, 1]).startswith(f"warmups/w1 (sha256 {'ab' * 32})")
    write("grpo", 2, None, None)
    assert "2 different" in artifact_check(tmp_path, ["gigpo", "grpo"], [0, 1, 2])
