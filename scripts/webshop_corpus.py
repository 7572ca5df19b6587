"""Write gigpo/data/webshop_corpus.txt: the text a local model's tokenizer for WebShop is trained on.

    PYTHONPATH=. python scripts/webshop_corpus.py > gigpo/data/webshop_corpus.txt

With gigpo's default corpus (the grid envs' prompts) WebShop's words split into letters: the expert's
search answers, the goal's words copied into `search[...]`, ran to 60 tokens, and the warm-up's model
wrote them as strings of syllables it could not end. This corpus is the shop's own text: the pages of
the train goals of recipes/webshop_tiny.yaml's shop, played by the expert with 30% random moves (seeded), with
each expert answer, then the vocabulary's words (vocab.py: types, attributes, options, brands, the
syllables of the made-up product-line names), so held-out goals' words still get whole-word or syllable
tokens. Each distinct line is kept once. Deterministic: the same code writes the same file.
"""
from __future__ import annotations

from gigpo.config import load_config
from gigpo.envs.demos import collect_demonstrations
from gigpo.envs.pool import EnvPool
from gigpo.envs.webshop import vocab

RECIPE = "recipes/webshop_tiny.yaml"
EPISODES = 300


def vocabulary_lines() -> list[str]:
    """The generated catalogue's words, in the shapes instructions and pages use them."""
    lines = []
    for t in vocab.PRODUCT_TYPES:
        options = ", ".join(f"{name}: {', '.join(values)}" for name, values in t.options)
        lines.append(f"i need a {t.container + ' ' if t.container else ''}{t.name} that is {', '.join(t.attributes)}")
        lines.append(f"{t.department} {t.name} {options}")
    lines.append(" ".join(b.lower() for b in vocab.BRANDS))
    lines.append(" ".join(vocab.SYLLABLES))
    return lines


def main() -> None:
    e = load_config(RECIPE, []).env
    with EnvPool(e.id, {**e.kwargs, "split": "train"}, max_steps=e.max_steps, workers=1) as pool:
        demos = collect_demonstrations(pool, list(range(EPISODES)), explore=0.3, seed=0)
    lines = []
    for d in demos:
        lines.append(d.view.observation)
        lines.append(f"<action>{d.action}</action>")
    lines += vocabulary_lines()
    print("\n".join(dict.fromkeys(line for text in lines for line in text.split("\n"))))


if __name__ == "__main__":
    main()
