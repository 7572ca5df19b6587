"""A warm-up saved once as an artifact (`gigpo warmup`, trainer.sft_artifact): its digest, and runs that refuse
any other weights (issue 55 item 1: pairs on different machines must start from the same policy)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gigpo.config import RecipeError, load_config
from gigpo.experiments.compare import artifact_check, run_dir_for, warmup_digest
from gigpo.trainer.warmup_artifact import DIGEST_FILE, artifact_sha256, install_artifact
from support.models import mean_answer_logprob
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


def _sokoban_pairs(model_dir: Path, rooms: int) -> list[tuple[list[int], list[int]]]:
    from transformers import AutoTokenizer

    from gigpo.envs.demos import collect_demonstrations
    from gigpo.envs.pool import EnvPool
    from gigpo.envs.prompt import PromptBuilder
    from gigpo.trainer.sft_warmup import response_ids

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with EnvPool("gigpo/Sokoban-v0", env_kwargs={"size": 5}, max_steps=8, workers=1) as pool:
        demos = collect_demonstrations(pool, list(range(rooms)), explore=0.3, seed=0)
    build = PromptBuilder(tokenizer, 8, 0, "{observation}").batch_token_ids
    return [(p, response_ids(tokenizer, d.action)) for p, d in zip(build([d.view for d in demos]), demos)]


def test_a_lora_warm_up_is_an_artifact_of_adapters_that_merge_to_the_same_bytes(tiny_model_dir, tmp_path: Path) -> None:
    """trainer.sft_lora_rank: the warm-up trains adapters only and learns; its merged model is the base plus
    B @ A * alpha / r (computed from the saved adapters in float64) and nothing else; the adapters alone, saved as
    an artifact and installed over the same base, give the same bytes (the digest `gigpo compare` pairs by); a
    different base is refused by name."""
    import torch
    from safetensors.torch import load_file, save_file

    from gigpo.trainer.sft_warmup import supervised_warmup
    from gigpo.trainer.warmup_artifact import save_artifact
    from gigpo.trainer.warmup_lora import ADAPTER_DIR, ADAPTER_FILES

    pairs = _sokoban_pairs(tiny_model_dir, 40)
    built = supervised_warmup(str(tiny_model_dir), tmp_path / "w", pairs, steps=30, lr=3e-3, batch_size=32, seed=0,
                              progress=False, lora_rank=4)
    adapters = built / ADAPTER_DIR
    assert sorted(p.name for p in adapters.iterdir()) == sorted(ADAPTER_FILES)

    base = load_file(str(tiny_model_dir / "model.safetensors"))
    merged = load_file(str(built / "model.safetensors"))
    factors = load_file(str(adapters / "adapter_model.safetensors"))
    scale = json.loads((adapters / "adapter_config.json").read_text())["lora_alpha"] / 4
    adapted = {k.removeprefix("base_model.model.").removesuffix(".lora_A.weight") + ".weight"
               for k in factors if k.endswith(".lora_A.weight")}
    assert "model.layers.0.self_attn.q_proj.weight" in adapted and "model.embed_tokens.weight" not in adapted
    for name, weight in base.items():
        if name not in adapted:
            assert torch.equal(merged[name], weight.float()), name  # only adapted layers move
            continue
        stem = "base_model.model." + name.removesuffix(".weight")
        delta = factors[f"{stem}.lora_B.weight"].double() @ factors[f"{stem}.lora_A.weight"].double() * scale
        assert torch.equal(merged[name], (weight.double() + delta).float()), name
        assert not torch.equal(merged[name], weight.float()), name  # the adapters were trained

    # it learned: the answers' mean log-probability rose (adapters start as a no-op, B = 0). From a randomly
    # initialised model, rank 4 plateaus near -4.7 from -7.0 (a full warm-up reaches -1.5): a bar of +1 nat
    before, after = mean_answer_logprob(tiny_model_dir, pairs[:20]), mean_answer_logprob(built, pairs[:20])
    assert after > before + 1.0, (before, after)

    digest = save_artifact(adapters, tmp_path / "art")
    assert not (tmp_path / "art" / "config.json").exists() and not (tmp_path / "art" / "model.safetensors").exists()
    installed = install_artifact(str(tmp_path / "art"), digest, tmp_path / "run" / "warmup", str(tiny_model_dir))
    assert warmup_digest(tmp_path / "run") == warmup_digest_of(built)
    assert (installed / "tokenizer_config.json").is_file()

    other = Path(shutil.copytree(tiny_model_dir, tmp_path / "other-base"))
    save_file({k: (v + 1 if k == "model.norm.weight" else v) for k, v in base.items()}, str(other / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(RecipeError, match="base weights") as refused:
        install_artifact(str(tmp_path / "art"), digest, tmp_path / "run2" / "warmup", str(other))
    assert "model.path" in str(refused.value) and not (tmp_path / "run2" / "warmup" / "hf").exists()


def test_gigpo_warmup_with_lora_saves_only_the_adapters(tmp_path: Path) -> None:
    """`gigpo warmup` on a recipe with trainer.sft_lora_rank writes the adapters (and the base's digest), not a model."""
    from gigpo.trainer.warmup_build import build_artifact
    from gigpo.trainer.warmup_lora import ADAPTER_FILES, base_weights_sha256
    from gigpo.models.resolve import resolve_model_path

    config = load_config(REPO / "recipes/sokoban_tiny.yaml", [*SMALL, *WARM, "trainer.sft_steps=4", "trainer.sft_lora_rank=2"])
    digest = build_artifact(config, tmp_path / "art")
    assert sorted(p.name for p in (tmp_path / "art").iterdir()) == sorted([*ADAPTER_FILES, DIGEST_FILE])
    assert digest == artifact_sha256(tmp_path / "art")
    base = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed)
    assert (tmp_path / "art" / "base_weights.sha256").read_text().strip() == base_weights_sha256(base)


def test_gigpo_eval_without_a_checkpoint_plays_the_recipes_start(tmp_path: Path) -> None:
    """`gigpo eval RECIPE` alone evaluates what the recipe's runs start from: its artifact as a run installs it
    (the same greedy episodes as the installed model, not the base's), refused under a wrong digest; a recipe whose
    warm-up lives only inside runs is told where its start is. (A LoRA artifact takes the same install step,
    tested above to give the built bytes.)"""
    from gigpo.models.resolve import resolve_model_path
    from gigpo.trainer.evaluation import evaluate_checkpoint, evaluate_start
    from gigpo.trainer.warmup_build import build_artifact

    settings = [*SMALL, *WARM, "env.eval_episodes=4"]
    built = load_config(REPO / "recipes/sokoban_tiny.yaml", settings)
    digest = build_artifact(built, tmp_path / "art")
    named = [*settings, "trainer.sft_steps=0", f"trainer.sft_artifact={tmp_path / 'art'}"]
    config = load_config(REPO / "recipes/sokoban_tiny.yaml", [*named, f"trainer.sft_artifact_sha256={digest}"])
    base = resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed)
    installed = install_artifact(str(tmp_path / "art"), digest, tmp_path / "run" / "warmup", base)

    start = evaluate_start(config)
    assert start == evaluate_checkpoint(config, str(installed))
    assert start["eval/invalid_action_rate"] < evaluate_checkpoint(config, base)["eval/invalid_action_rate"]
    wrong = load_config(REPO / "recipes/sokoban_tiny.yaml", [*named, f"trainer.sft_artifact_sha256={'f' * 64}"])
    with pytest.raises(RecipeError, match=digest):
        evaluate_start(wrong)
    with pytest.raises(RecipeError, match="--checkpoint"):
        evaluate_start(built)
