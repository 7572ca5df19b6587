"""Which part of the warm-up makes the tiny model slow to learn the move (issue 24, E4 screen).

    PYTHONPATH=. python benchmarks/warmup_variants.py --variants preset,action-only,share-0.5 --steps 150

Every variant trains the recipe's local model on the recipe's own demonstrations (the warm-up's states and
expert labels, AdamW lr 1e-3, batch 128, the same batch order) with one thing changed, and reports every
50 steps the teacher-forced accuracy of the move on 300 held-out rooms' states (the argmax at the token
after `<action>`) and that token's mean negative log-likelihood. Accuracy is a cheap proxy of greedy
success (benchmarks/learnability.py plays the env; this takes a tenth of its time). Variants:

- `preset`: what `supervised_warmup` does by default (every answer token weighs the same, clip 1.0);
- `action-only`: the loss on the move's token alone (the format is never taught: a screen, not a recipe);
- `share-X`: `trainer.sft_action_share=X` (the move's tokens carry X of each answer's loss);
- `short-tags`: `<action>` and `</action>` as single tokens (a 4-token answer instead of 8);
- `beta2-0.99`: Adam's beta2 0.99 instead of 0.999 (forgets the first steps' large format gradients);
- `no-clip-no-wd`: no gradient clipping and no weight decay (the prototype's optimizer);
- `gpt2`: a GPT-2 model of the same width and depth (learned absolute positions, LayerNorm, GELU).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from gigpo.config import load_config
from gigpo.envs.demos import collect_demonstrations
from gigpo.infra.seeds import demo_seeds
from gigpo.models.resolve import resolve_model_path
from gigpo.trainer.setup import build_pool, build_prompt_fn
from gigpo.trainer.sft_warmup import AnswerWeights, answer_batch, response_ids, weighted_answer_loss

Pair = tuple[list[int], list[int]]


def batch_tensors(batch: list[Pair], pad: int, move_at: int, move_only: bool):
    ids, labels, attention = answer_batch(batch, pad)
    if move_only:  # the move's token alone keeps its label
        keep = torch.zeros_like(labels, dtype=torch.bool)
        for row, (prompt, _) in enumerate(batch):
            keep[row, len(prompt) + move_at] = True
        labels = labels.masked_fill(~keep, -100)
    return ids, labels, attention, ids.shape[1]


@torch.no_grad()
def move_accuracy(model, pairs: list[Pair], pad: int, move_at: int) -> tuple[float, float]:
    model.eval()
    correct, nll = 0, 0.0
    for start in range(0, len(pairs), 256):
        chunk = pairs[start:start + 256]
        ids, _, attention, _ = batch_tensors(chunk, pad, move_at, False)
        logits = model(input_ids=ids, attention_mask=attention).logits
        for row, (prompt, response) in enumerate(chunk):
            logp = torch.log_softmax(logits[row, len(prompt) + move_at - 1].float(), -1)
            correct += int(logp.argmax().item() == response[move_at])
            nll -= logp[response[move_at]].item()
    model.train()
    return correct / len(pairs), nll / len(pairs)


def build_model(variant: str, base: str, tokenizer):
    torch.manual_seed(0)
    if variant == "gpt2":
        spec = json.loads(open(os.path.join(base, "config.json")).read())
        return GPT2LMHeadModel(GPT2Config(
            vocab_size=spec["vocab_size"], n_positions=256, n_embd=spec["hidden_size"], n_layer=spec["num_hidden_layers"],
            n_head=spec["num_attention_heads"], n_inner=spec["intermediate_size"], resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id))
    return AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/sokoban_long.yaml")
    parser.add_argument("--variants", default="preset,action-only,share-0.5")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--held-out-rooms", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_config(args.recipe, ["logging.progress=false", "env.workers=1"])
    t, e = config.trainer, config.env
    base = str(resolve_model_path(config.model.path, config.model.init, config.model.corpus, config.model.seed))
    tokenizer = AutoTokenizer.from_pretrained(base)
    with build_pool(config) as pool:
        demos = collect_demonstrations(pool, demo_seeds(e, 0, t.sft_rooms), explore=1.0 - t.sft_expert_share, seed=0)
        held = collect_demonstrations(pool, [e.eval_seed_start + i for i in range(args.held_out_rooms)],
                                      explore=1.0 - t.sft_expert_share, seed=1)
    prompt_fn = build_prompt_fn(config, tokenizer)
    pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompt_fn([d.view for d in demos]), demos)]
    held_pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompt_fn([d.view for d in held]), held)]
    move_at = 3  # '<' 'action' '>' MOVE '</' 'action' '>' end-of-turn with the local tokenizer
    print(f"{len(pairs)} training states, {len(held_pairs)} held-out states, load {os.getloadavg()[0]:.1f}", flush=True)
    for variant in args.variants.split(","):
        model = build_model(variant, base, tokenizer).train()
        train, test, at = pairs, held_pairs, move_at
        if variant == "short-tags":
            short = copy.deepcopy(tokenizer)
            short.add_tokens(["<action>", "</action>"])
            retag = lambda ps: [(p, short(tokenizer.decode(r[:-1]), add_special_tokens=False)["input_ids"] + [r[-1]])
                                for p, r in ps]
            train, test, at = retag(pairs), retag(held_pairs), 1
        weights = AnswerWeights(tokenizer, float(variant.split("-", 1)[1])) if variant.startswith("share-") else None
        optimizer = torch.optim.AdamW(model.parameters(), lr=t.sft_lr, weight_decay=0.0 if variant == "no-clip-no-wd" else 0.01,
                                      betas=(0.9, 0.99) if variant == "beta2-0.99" else (0.9, 0.999))
        rng, started = random.Random(0), time.time()
        for step in range(1, args.steps + 1):
            batch = [train[rng.randrange(len(train))] for _ in range(t.sft_batch_size)]
            ids, labels, attention, width = batch_tensors(batch, tokenizer.pad_token_id, at, variant == "action-only")
            if weights is None:
                loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
            else:
                logits = model(input_ids=ids, attention_mask=attention).logits
                loss = weighted_answer_loss(logits, labels, weights.rows(batch, width))
            optimizer.zero_grad()
            loss.backward()
            if variant != "no-clip-no-wd":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if step % 50 == 0 or step == args.steps:
                accuracy, nll = move_accuracy(model, test, tokenizer.pad_token_id, at)
                print(json.dumps({"variant": variant, "step": step, "move_accuracy": round(accuracy, 4),
                                  "move_nll": round(nll, 4), "seconds": round(time.time() - started),
                                  "load": round(os.getloadavg()[0], 1)}), flush=True)


if __name__ == "__main__":
    main()
