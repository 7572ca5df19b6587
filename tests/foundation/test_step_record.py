"""At most 3 classes in gigpo/ hold per-step data (issue 40): one record carries a step from the env to the loss.

"Per-step data" here is what a step is trained and grouped on: its tokens (prompt_ids, response_ids, and
input_ids once packed), its log-probs for the loss (behaviour_logprobs, response_logprobs, logp_old), its
anchor key (anchor, anchor_text) and its advantage (advantage, episode_advantage, step_advantage). A class
holds it when it declares a field of one of those names: a class-level annotation (dataclass fields) or a
`self.<name>` assignment in `__init__`. The three allowed today are the record (advantage/rows.StepRows),
the engines' sample (trainer/batching.TrainSample) and the tensor-packed micro-batch (MicroBatch).

Not counted, because they hold none of those names: the two inputs a step is filled from, each the contract
of its own side (the env's EpisodeView: the episode's current observation and last reward; the generator's
Completion: one request's token_ids and logprobs), and the rollout's tally, which appends into lists keyed
by StepRows' own column names and hands them to StepRows. The graph is read with `ast`: nothing is imported.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PER_STEP_FIELDS = frozenset({
    "prompt_ids", "response_ids", "input_ids",                   # tokens
    "behaviour_logprobs", "response_logprobs", "logp_old",       # log-probs for the loss
    "anchor", "anchor_text",                                     # the step-group key
    "advantage", "episode_advantage", "step_advantage",          # the estimate
})
ALLOWED = 3


def declared_fields(cls: ast.ClassDef) -> set[str]:
    """Names `cls` declares: annotated class attributes, and `self.x = ...` / `self.x: T = ...` in __init__."""
    names = {item.target.id for item in cls.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for node in ast.walk(item):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                for target in targets:
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            names.add(t.attr)
    return names


def per_step_classes(root: Path) -> dict[str, set[str]]:
    """'path:Class' -> the per-step fields it declares, for every class under root/gigpo that declares one."""
    found = {}
    for path in sorted((root / "gigpo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                hit = declared_fields(node) & PER_STEP_FIELDS
                if hit:
                    found[f"{path.relative_to(root)}:{node.name}"] = hit
    return found


def test_at_most_three_classes_hold_per_step_data():
    found = per_step_classes(ROOT)
    assert "gigpo/advantage/rows.py:StepRows" in found  # the walk sees the record itself
    assert len(found) <= ALLOWED, (f"{len(found)} classes hold per-step data, at most {ALLOWED} may: "
                                   + "; ".join(f"{k} {sorted(v)}" for k, v in found.items())
                                   + ". Add a column to StepRows (gigpo/advantage/rows.py) instead of a new shape.")


def test_the_walk_sees_fields_declared_either_way(tmp_path):
    """The checker itself: dataclass fields and __init__ attributes both count; methods and locals do not."""
    module = tmp_path / "gigpo" / "m.py"
    module.parent.mkdir()
    module.write_text(
        "from dataclasses import dataclass\n"
        "@dataclass\nclass A:\n    prompt_ids: list\n    other: int = 0\n"
        "class B:\n    def __init__(self):\n        self.advantage, self.x = 0.0, 1\n"
        "class C:\n    def anchor(self):\n        advantage = 1\n        return advantage\n")
    assert per_step_classes(tmp_path) == {"gigpo/m.py:A": {"prompt_ids"}, "gigpo/m.py:B": {"advantage"}}
