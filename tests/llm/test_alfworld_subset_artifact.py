"""recipes/alfworld_subset_smollm2.yaml starts every run from a committed LoRA warm-up (issue 55, item 1), so that
pairs run on different days and machines start from the same policy. A clean clone must hold that artifact whole and
be able to install it on the pinned SmolLM2: the artifact's digest, its size and its base are checked here. (The merge
itself, and the refusal of a wrong digest or base, are tested with the tiny model in
tests/trainer/test_warmup_artifact.py; the start it gives is measured in docs/results/issue55-alfworld/.)"""
from __future__ import annotations

from pathlib import Path

from gigpo.config import load_config
from gigpo.trainer.warmup_artifact import artifact_sha256
from gigpo.trainer.warmup_lora import ADAPTER_FILES, check_base

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "alfworld_subset_smollm2.yaml"
COMMIT_LIMIT = 20e6
"""Issue 55: an artifact is committed only if it is at most 20 MB."""


def test_the_recipes_warm_up_is_committed_whole_and_fits_the_pinned_smollm2(smollm2_dir) -> None:
    t = load_config(RECIPE).trainer
    assert t.sft_artifact and t.sft_lora_rank > 0
    folder = REPO / t.sft_artifact  # relative to the repository root, where users run gigpo
    assert {p.name for p in folder.iterdir()} >= set(ADAPTER_FILES)
    assert artifact_sha256(folder) == t.sft_artifact_sha256
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) <= COMMIT_LIMIT
    check_base(folder, smollm2_dir, t.sft_artifact)  # RecipeError if the adapters were trained on other weights
