"""Write gigpo/data/alfworld_corpus.txt: the text a local model's tokenizer for ALFWorld is trained on.

    PYTHONPATH=. python scripts/alfworld_corpus.py > gigpo/data/alfworld_corpus.txt

ALFWorld prompts are mostly object and receptacle names ("go to sidetable 3, open drawer 2, ..."), which
gigpo's default corpus (the grid envs' prompts) splits into letters: the task, observation and admissible
actions took ~234 tokens. This corpus is what the recipe's prompts are made of: the sample tasks
(`SAMPLE_TASKS_DIR`, train split) played by the expert with 30% random moves (seeded), every prompt rendered with
recipes/alfworld_tiny.yaml's template and each expert answer, then one line per object and receptacle type of
ALFWorld (alfworld.gen.constants) in the commands they appear in, so names the sample tasks lack still
get whole-word tokens. Each distinct line is kept once. Deterministic: the same alfworld wheel writes the same file.
"""
from __future__ import annotations

from gigpo.envs.alfworld import ENV_ID, SAMPLE_TASKS_DIR
from gigpo.envs.demos import collect_demonstrations
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import render_prompt

TEMPLATE = "Task: {task}\n{history}{observation}\n{admissible_actions}"  # recipes/alfworld_tiny.yaml's
HISTORY = 1  # history lines appear in the corpus even if a recipe shows none


def type_lines() -> list[str]:
    """One line per ALFWorld object/receptacle type, in the shapes the engine prints them."""
    from alfworld.gen import constants

    lines = []
    for name in sorted({n.lower() for n in constants.OBJECTS}):
        lines.append(f"You see a {name} 1, and a {name} 2. take {name} 1 from countertop 1, put {name} 1 in/on "
                     f"cabinet 1, examine {name} 1, go to {name} 1, open {name} 1, close {name} 1, use {name} 1, "
                     f"clean {name} 1 with sinkbasin 1, heat {name} 1 with microwave 1, cool {name} 1 with fridge 1, "
                     f"put some {name} in cabinet, find two {name} and put them in drawer.")
    return lines


def main() -> None:
    lines: list[str] = []
    for split in ("train",):  # the held-out sample tasks stay out
        with EnvPool(ENV_ID, {"data_path": str(SAMPLE_TASKS_DIR), "split": split, "expert": True},
                     max_steps=50, workers=1) as pool:
            demos = collect_demonstrations(pool, list(range(12)), explore=0.3, seed=0)
        for d in demos:
            v = d.view
            lines.append(render_prompt(TEMPLATE, v.task, v.step + 1, 50, v.observation, v.history, HISTORY,
                                       v.admissible_actions, v.action_format))
            lines.append(f"<action>{d.action}</action>")
    lines += type_lines()
    # each distinct line once: the file stays small, and the names still dominate the merges
    print("\n".join(dict.fromkeys(line for text in lines for line in text.split("\n"))))


if __name__ == "__main__":
    main()
