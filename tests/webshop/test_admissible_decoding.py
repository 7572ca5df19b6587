"""benchmarks/admissible_decoding.py: held to the page's buttons, and free where the list is a template."""
from __future__ import annotations

import sys
from pathlib import Path

from transformers import AutoTokenizer

from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import PromptBuilder
from gigpo.rollout.types import SamplingSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from admissible_decoding import AdmissibleGreedyGenerator  # noqa: E402


def test_answers_stay_on_the_list_except_where_it_is_a_template(tiny_model_dir):
    """An untrained model (random weights) writes anything when free; held to the list, its greedy answer on
    a results page must be one of that page's clicks, while the search page, whose list is the template
    `search[<your query>]`, decodes freely: held to the template it could only ever search for "<your query>"."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    builder = PromptBuilder(tokenizer, max_steps=10, history_length=0, template="{observation}\n{admissible_actions}")
    generator = AdmissibleGreedyGenerator(str(tiny_model_dir), dtype="fp32")
    prompt_fn = generator.remember(builder.batch_token_ids)
    settings = SamplingSettings(temperature=0.0, max_new_tokens=40)
    with EnvPool("gigpo/WebShop-v0", {"num_products": 100, "split": "test"}, max_steps=10, workers=1) as pool:
        search_page = pool.reset([0], group_size=1)[0]
        assert list(search_page.admissible_actions) == ["search[<your query>]"]
        [free] = generator.generate(prompt_fn([search_page]), settings)
        [plain] = super(AdmissibleGreedyGenerator, generator).generate(builder.batch_token_ids([search_page]), settings)
        assert free.token_ids == plain.token_ids  # not restricted: the same as ordinary greedy decoding
        results = pool.step({0: f"<action>{pool.expert_actions([0])[0]}</action>"})[0]
        clicks = list(results.admissible_actions)
        assert len(clicks) > 3 and all(c.startswith("click[") for c in clicks)
        [held] = generator.generate(prompt_fn([results]), settings)
        assert held.text in {f"<action>{c}</action>" for c in clicks}, held.text
        assert held.finish_reason == "stop"
    generator.close()
