"""Greedy decoding restricted to the admissible actions: a diagnostic for envs that list them (ALFWorld, WebShop).

Issue 38 found a warmed-up tiny model at 0% greedy success on ALFWorld with 75-94% of its answers refused:
frequent demonstration moves that are not in the room's list. This asks what the same weights do when they
cannot leave the list: at each answer token only tokens that continue some admissible answer
(`<action>{a}</action>` then end of turn, as the warm-up writes them) may be chosen, the most likely of
those taken. If that reaches the 15-40% start the issue asks for, the gap is the answers' validity, and a
policy masked to the list is worth building into rollout and trainer; if not, the choices themselves are
not learned yet. Evaluation only: nothing here trains, and `gigpo train` does not use it.
"""
from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

import torch

from gigpo.rollout.hf_backend import HFGenerator
from gigpo.rollout.types import Completion, SamplingSettings
from gigpo.trainer.sft_warmup import response_ids

Trie = dict[int, "Trie"]
TEMPLATE = re.compile(r"<[^<>]+>")
"""A placeholder in an admissible action ("search[<your query>]"): the answer is free text there."""


def answer_trie(tokenizer, actions: Sequence[str]) -> Trie:
    """Every admissible answer's token ids, as a prefix tree (an answer ends at a node with no children)."""
    root: Trie = {}
    for action in actions:
        node = root
        for token in response_ids(tokenizer, action):
            node = node.setdefault(token, {})
    return root


class AdmissibleGreedyGenerator(HFGenerator):
    """An HF generator whose greedy answers are always one of the prompt's admissible actions.

    The rollout gives a generator only token ids, so `remember` (wrapped around the prompt function) keeps each
    prompt's admissible actions, found again by the prompt's ids. A prompt without a list decodes as usual, and
    so does one whose list holds a template the model fills in (an action with a `<...>` placeholder, as
    WebShop's search page lists `search[<your query>]`): held to the list, it could only write the template.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._actions: dict[tuple[int, ...], list[str]] = {}

    def remember(self, prompt_fn: Callable) -> Callable:
        def wrapped(views):
            prompts = prompt_fn(views)
            for view, ids in zip(views, prompts):
                if view.admissible_actions and not any(TEMPLATE.search(a) for a in view.admissible_actions):
                    self._actions[tuple(ids)] = list(view.admissible_actions)
            return prompts
        return wrapped

    def generate(self, prompts: list[list[int]], settings: SamplingSettings) -> list[Completion]:
        if settings.temperature > 0:
            raise ValueError("admissible decoding is greedy only: evaluate with rollout.eval_temperature=0")
        out = []
        for index, prompt in enumerate(prompts):
            actions = self._actions.get(tuple(prompt))
            if actions is None:
                out.extend(c for c in super().generate([prompt], settings))
                out[-1].prompt_index = index
            else:
                out.append(self._walk(index, prompt, answer_trie(self.tokenizer, actions), settings.max_new_tokens))
        return out

    @torch.no_grad()
    def _walk(self, index: int, prompt: list[int], trie: Trie, max_new_tokens: int) -> Completion:
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        feed, node, tokens, logprobs = list(prompt), trie, [], []
        while node and len(tokens) < max_new_tokens:
            ids = torch.tensor([feed], device=self.device)
            logits = self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[0, -1].float()
            logp = torch.log_softmax(logits, -1)
            allowed = torch.tensor(sorted(node), device=self.device)
            token = int(allowed[logp[allowed].argmax()])
            tokens.append(token)
            logprobs.append(float(logp[token]))
            node, feed = node[token], [token]
        return Completion(prompt_index=index, token_ids=tokens,
                          text=self.tokenizer.decode(tokens, skip_special_tokens=True), logprobs=logprobs,
                          finish_reason="stop" if not node else "length", weight_version=self.version)
