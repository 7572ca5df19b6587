"""How fast a model learns to read the grid: greedy success against supervised warm-up steps (issue 24, E4).

    PYTHONPATH=. python benchmarks/learnability.py --recipe recipes/sokoban_long.yaml \
        --steps 100,150,175,250,400 --episodes 200 --variant theta1e6:rope_parameters.rope_theta=1000000 --variant theta1e4:rope_parameters.rope_theta=10000

Each variant starts from the recipe's local model (`model.init`, same random weights and tokenizer) with
config.json fields changed (RoPE has no weights, so `rope_parameters.rope_theta=` is exactly a different position code on
the same initial weights). The warm-up is gigpo's own (`supervised_warmup`, same demonstrations, batches
and seed as the recipe's); at each listed step the model is copied into an HF generator and played greedily
on held-out tasks through the real env pool and rollout, as `gigpo train` evaluates. Prints one row per
variant and step, and a final table. CPU-heavy: run it on an idle machine (the load average is printed).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from admissible_decoding import AdmissibleGreedyGenerator
from transformers import AutoTokenizer
from gigpo.config import load_config
from gigpo.envs.demos import collect_demonstrations
from gigpo.infra.seeds import demo_seeds, sft_warmup_seed
from gigpo.models.resolve import resolve_model_path
from gigpo.rollout.hf_backend import HFGenerator
from gigpo.trainer.evaluation import evaluate
from gigpo.trainer.setup import build_generator, build_pool, build_prompt_fn
from gigpo.trainer.sft_warm_start import check_answers_fit
from gigpo.trainer.sft_warmup import response_ids, supervised_warmup


def variant_model(base: str, changes: dict[str, float], out: Path) -> str:
    shutil.copytree(base, out)
    config = json.loads((out / "config.json").read_text())
    for dotted, value in changes.items():  # "rope_parameters.rope_theta": transformers 5 nests RoPE settings
        *parents, key = dotted.split(".")
        node = config
        for name in parents:
            node = node[name]
        if key not in node:
            raise KeyError(f"{dotted} is not in {base}/config.json; name an existing field")
        node[key] = value
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return str(out)


def parse_variant(text: str) -> tuple[str, dict[str, float]]:
    name, _, rest = text.partition(":")
    changes = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        changes[key] = json.loads(value)
    return name, changes


def print_invalid(played, count: int) -> None:
    """A few refused actions of an evaluation, spread over its episodes: what the model wrote and why."""
    refused = [s for s in played.steps.as_dicts() if not s["action_valid"]]
    for s in refused[:: max(1, len(refused) // max(1, count))][:count]:
        cut = ", cut at max_new_tokens" if s["truncated_response"] else ""
        print(f"  invalid (episode {s['traj']}, step {s['step']}{cut}): {s['response']!r} -> {s['invalid_reason']}",
              flush=True)


def print_episodes(played, count: int) -> None:
    """The first `count` held-out episodes as their action sequences: what a score of 0 with no
    invalid actions is made of (loops, a missed pick-up, the horizon)."""
    steps = played.steps.as_dicts()
    for traj in sorted({s["traj"] for s in steps})[:count]:
        mine = sorted((s for s in steps if s["traj"] == traj), key=lambda s: s["step"])
        moves = " | ".join(str(s["action"]) if s["action_valid"] else f"!{s['response'][:30]}" for s in mine)
        print(f"  episode {traj} ({len(mine)} steps, return {sum(s['reward'] for s in mine):.1f}): {moves}", flush=True)


def label_conflicts(pairs: list[tuple[list[int], list[int]]]) -> float:
    """Share of demonstrations whose prompt also appears with another label: no policy of that prompt can be
    right on all of them. A searching expert that remembers more than the prompt shows produces these."""
    labels: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    for prompt, answer in pairs:
        labels.setdefault(tuple(prompt), set()).add(tuple(answer))
    return sum(len(labels[tuple(prompt)]) > 1 for prompt, _ in pairs) / max(1, len(pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/sokoban_long.yaml")
    parser.add_argument("--steps", default="100,150,175,250,400")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--variant", action="append", default=[], help="NAME:key=value,... (config.json fields, dotted for nested ones)")
    parser.add_argument("--presets", default=None, help="comma-separated model.init presets to compare (each with the "
                        "recipe's corpus and seed, on the same demonstrations); default: the recipe's model")
    parser.add_argument("--examples", type=int, default=3, help="invalid actions to print from each evaluation "
                        "(the response, why the env refused it), to see what a low score is made of")
    parser.add_argument("--episodes-shown", type=int, default=2, help="held-out episodes to print as action "
                        "sequences at each evaluation")
    parser.add_argument("--keep", default=None, help="folder to save the last warm-up step's model in (HF), to "
                        "look at or evaluate again; default: dropped")
    parser.add_argument("--admissible", action="store_true", help="also evaluate each checkpoint with greedy answers "
                        "restricted to the admissible actions (benchmarks/admissible_decoding.py), for envs that list them")
    parser.add_argument("--generator", choices=("hf-fp32", "recipe"), default="hf-fp32",
                        help="what plays the evaluations: an HF generator in fp32 (the default; what earlier curves "
                        "used), or the recipe's own (rollout.backend and model.dtype, as `gigpo train` evaluates: "
                        "vLLM's prefix cache makes a real LLM's evaluations several times cheaper)")
    parser.add_argument("--train-episodes", type=int, default=0, help="also evaluate each checkpoint greedily on this "
                        "many tasks of the training split (the warm-up's own tasks): high there and low held out "
                        "is memorising; low on both is a policy that cannot play even what it was shown")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(args.recipe, [*args.overrides, "logging.progress=false", f"env.eval_episodes={args.episodes}"])
    checkpoints = sorted(int(s) for s in args.steps.split(","))
    variants = [parse_variant(v) for v in args.variant] or [("preset", {})]
    t, e = config.trainer, config.env
    presets = args.presets.split(",") if args.presets else [config.model.init]
    bases = {p: resolve_model_path(config.model.path, p, config.model.corpus, config.model.seed) for p in presets}
    if len(presets) > 1:  # one row per preset (and variant)
        variants = [(f"{p}" if name == "preset" else f"{p}-{name}", changes, p) for p in presets for name, changes in variants]
    else:
        variants = [(name, changes, presets[0]) for name, changes in variants]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, build_pool(config) as pool:
        eval_pool = build_pool(config, evaluation=True) if e.eval_kwargs else pool
        seed = sft_warmup_seed(t)  # the recipe's own demonstrations, as sft_warm_start() makes them
        started = time.perf_counter()
        demos = collect_demonstrations(pool, demo_seeds(e, seed, t.sft_rooms), explore=1.0 - t.sft_expert_share, seed=seed)
        print(f"{len(demos)} demonstrations from {t.sft_rooms} episodes in {time.perf_counter() - started:.0f} s "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        for name, changes, preset in variants:
            model_path = variant_model(bases[preset], changes, Path(tmp) / name)
            generator = HFGenerator(model_path, dtype="fp32") if args.generator == "hf-fp32" else build_generator(config, model_path)
            restricted = AdmissibleGreedyGenerator(model_path, dtype="fp32") if args.admissible else None
            tokenizer = AutoTokenizer.from_pretrained(model_path)
            prompt_fn = build_prompt_fn(config, tokenizer)
            pairs = [(p, response_ids(tokenizer, d.action)) for p, d in zip(prompt_fn([d.view for d in demos]), demos)]
            check_answers_fit(pairs, config.rollout.max_new_tokens)
            print(f"{name}: {label_conflicts(pairs):.1%} of the {len(pairs)} demonstrations share their prompt with "
                  f"another expert action ({len({tuple(p) for p, _ in pairs})} distinct prompts)", flush=True)
            started = time.perf_counter()

            def score(step: int, model) -> None:
                if step not in checkpoints:
                    return
                generator.update_weights(policy_weights(model, full_state=args.generator == "hf-fp32"), version=step)
                metrics = evaluate(config, eval_pool, generator, prompt_fn,
                                   on_rollout=lambda played: (print_invalid(played, args.examples),
                                                              print_episodes(played, args.episodes_shown)))
                success = metrics["eval/success"]
                rows.append((name, step, success))
                stderr = (success * (1 - success) / args.episodes) ** 0.5
                print(f"{name}: step {step} greedy success {success:.1%} +- {stderr:.1%} ({args.episodes} held-out tasks, "
                      f"{time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.1f}; invalid actions "
                      f"{metrics['eval/invalid_action_rate']:.1%}, episode length {metrics['eval/episode_length']:.1f})", flush=True)
                if args.train_episodes:
                    # the evaluation's n consecutive seeds on the training pool: envs that pick the task by seed %
                    # tasks (ALFWorld, WebShop) play n distinct training tasks, all demonstrated when sft_rooms
                    # covers the split
                    seen = evaluate(config, pool, generator, prompt_fn, episodes=args.train_episodes,
                                    on_rollout=lambda played: print_episodes(played, 1))
                    rows.append((f"{name}-train-tasks", step, seen["eval/success"]))
                    print(f"{name}: step {step} greedy success on {args.train_episodes} training tasks "
                          f"{seen['eval/success']:.1%} (invalid actions {seen['eval/invalid_action_rate']:.1%}, "
                          f"episode length {seen['eval/episode_length']:.1f})", flush=True)
                if restricted is not None:
                    restricted.update_weights(policy_weights(model, full_state=True), version=step)
                    held = evaluate(config, eval_pool, restricted, restricted.remember(prompt_fn))
                    rows.append((f"{name}-admissible", step, held["eval/success"]))
                    print(f"{name}: step {step} greedy success restricted to the admissible actions {held['eval/success']:.1%} "
                          f"(load {os.getloadavg()[0]:.1f}; invalid actions {held['eval/invalid_action_rate']:.1%}, "
                          f"episode length {held['eval/episode_length']:.1f})", flush=True)

            supervised_warmup(model_path, Path(tmp) / f"{name}-out", pairs, max(checkpoints), t.sft_lr, t.sft_batch_size,
                              seed, progress=False, dtype=config.model.dtype, after_step=score,
                              action_share=t.sft_action_share, micro_tokens=t.sft_micro_tokens,
                              lora_rank=t.sft_lora_rank)
            if args.keep:
                shutil.copytree(Path(tmp) / f"{name}-out" / "hf", Path(args.keep) / name, dirs_exist_ok=True)
                print(f"{name}: kept the last step's model in {Path(args.keep) / name}", flush=True)
            generator.close()
            if restricted is not None:
                restricted.close()
        if eval_pool is not pool:
            eval_pool.close()
    print("\n| variant | " + " | ".join(f"{s} steps" for s in checkpoints) + " |")
    print("|---|" + "---|" * len(checkpoints))
    for name in dict.fromkeys(n for n, _, _ in rows):
        print(f"| {name} | " + " | ".join(f"{100 * s:.1f}%" for n, _, s in rows if n == name) + " |")


def policy_weights(model, full_state: bool):
    """(name, tensor) pairs for a generator: a LoRA warm-up's base with its adapters merged (trainer.sft_lora_rank),
    else the parameters, or the whole state dict (buffers too) when `full_state`."""
    from gigpo.trainer.lora import is_lora, merged_weights

    if is_lora(model):
        return merged_weights(model, zero3=False)
    weights = model.state_dict().items() if full_state else model.named_parameters()
    return ((k, v.detach()) for k, v in weights)


if __name__ == "__main__":
    main()
