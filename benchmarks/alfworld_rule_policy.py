"""Does the ALFWorld memory prompt carry enough to act on? A rule that reads only its text, against the expert.

    PYTHONPATH=. python benchmarks/alfworld_rule_policy.py --data ~/.cache/gigpo/alfworld/subset-s0 \
        --split valid_seen --horizon 20 --tokenizer ~/.cache/gigpo/models/smollm2-135m-instruct-v1

Every task of the split (filtered by --task-types, --scene-range, --max-walkthrough) is played once, in one
process, with episode seed = its index, for at most --horizon steps, by:
- the rule policy (gigpo/envs/alfworld/rule_policy.py), which sees nothing but the memory prompt's text
  (env kwargs prompt: memory, rendered as the trainer renders it, gigpo.envs.prompt.view_prompt);
- the fixed expert the warm-up imitates (env kwargs expert: True: the move/put fix and SearchOnce);
- with --stock, the stock-search expert (the move/put fix only), for reference.
It prints one line per task, then success per policy and task type, the rule's share of the expert's
success, and, with --tokenizer, the prompt length in tokens (chat template, empty system prompt, as in
recipes/alfworld_smollm2.yaml) of the memory prompt and of the paper's history prompt (last 2 steps) on
the states the rule visited, and of the memory block alone (the env's preamble, the observation, the
admissible list and the format line are the rest). The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from gigpo.envs.alfworld.env import ALFWorldEnv
from gigpo.envs.alfworld.game import load_game_data
from gigpo.envs.alfworld.rule_policy import choose
from gigpo.envs.prompt import render_prompt

sys.path.insert(0, str(Path(__file__).parent))
from alfworld_expert_search import play  # noqa: E402

SUBSET = ["pick_and_place_simple", "look_at_obj_in_light"]


def play_env(env: ALFWorldEnv, index: int, horizon: int, rule: bool, tokenizer: Any = None) -> dict[str, Any]:
    observation, info = env.reset(seed=index, options={"task_index": index})
    history: list[tuple[str, str]] = []
    memory_tokens, history_tokens, block_tokens, actions = [], [], [], []
    for step in range(horizon):
        if rule:
            prompt = render_prompt(env.prompt_template, env.task, step + 1, horizon, observation, [], 0,
                                   info["admissible_actions"], env.action_format, memory=info["memory"])
            action = choose(prompt)
            if tokenizer is not None:
                paper = render_prompt(ALFWorldEnv.prompt_template, env.task, step + 1, horizon, observation, history,
                                      2, info["admissible_actions"], env.action_format)
                memory_tokens.append(_tokens(tokenizer, prompt))
                history_tokens.append(_tokens(tokenizer, paper))
                block_tokens.append(len(tokenizer(info["memory"], add_special_tokens=False)["input_ids"]))
        else:
            action = info.get("expert_action") or "look"
        history.append((observation, action))
        actions.append(action)
        observation, _, terminated, _, info = env.step(f"<action>{action}</action>")
        if terminated:
            break
    return {"won": env.won(), "steps": len(actions), "actions": actions,
            "memory_tokens": memory_tokens, "history_tokens": history_tokens, "block_tokens": block_tokens}


def _tokens(tokenizer: Any, user: str) -> int:
    text = tokenizer.apply_chat_template([{"role": "system", "content": ""}, {"role": "user", "content": user}],
                                         tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _spread(values: list[int]) -> Optional[dict[str, float]]:
    if not values:
        return None
    ordered = sorted(values)
    return {"mean": round(statistics.mean(values), 1), "median": ordered[len(ordered) // 2],
            "p90": ordered[int(0.9 * (len(ordered) - 1))], "max": ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--task-types", nargs="+", default=SUBSET)
    parser.add_argument("--scene-range", nargs=2, type=int, default=None)
    parser.add_argument("--max-walkthrough", type=int, default=None)
    parser.add_argument("--horizon", type=int, default=20)
    parser.add_argument("--stock", action="store_true", help="also play the stock-search expert")
    parser.add_argument("--tokenizer", default=None, help="a model folder whose tokenizer counts prompt tokens")
    args = parser.parse_args()

    filters = {"task_types": args.task_types, "scene_range": args.scene_range, "max_walkthrough": args.max_walkthrough}
    common = {"data_path": os.path.expanduser(args.data), "split": args.split, **filters}
    rule_env = ALFWorldEnv(**common, prompt="memory")
    expert_env = ALFWorldEnv(**common, expert=True)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(args.tokenizer))

    started = time.process_time()
    rows = []
    for index, task in enumerate(rule_env.tasks):
        rule = play_env(rule_env, index, args.horizon, rule=True, tokenizer=tokenizer)
        expert = play_env(expert_env, index, args.horizon, rule=False)
        stock_won, stock_commands = (play(task, load_game_data(task), search_once=False, seed=index,
                                          max_steps=args.horizon) if args.stock else (False, []))
        rows.append({"task": task.path.parent.name, "type": task.task_type, "scene": task.scene,
                     "rule": rule["won"], "rule_steps": rule["steps"], "expert": expert["won"],
                     "expert_steps": expert["steps"], "stock": stock_won, "stock_steps": len(stock_commands),
                     "memory_tokens": rule["memory_tokens"], "history_tokens": rule["history_tokens"],
                     "block_tokens": rule["block_tokens"]})
        print(f"{task.path.parent.name:<56} rule {'won ' if rule['won'] else 'LOST'} {rule['steps']:>2} | "
              f"expert {'won ' if expert['won'] else 'LOST'} {expert['steps']:>2}"
              + (f" | stock {'won ' if stock_won else 'LOST'} {len(stock_commands):>2}" if args.stock else ""), flush=True)
        if not rule["won"]:
            print(f"    rule's actions: {'; '.join(rule['actions'])}")

    result: dict[str, Any] = {"data": args.data, "split": args.split, "filters": filters, "horizon": args.horizon,
                              "tasks": len(rows), "cpu_s": round(time.process_time() - started, 1)}
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_type[row["type"]].append(row)
    for name, group in [("all", rows), *sorted(by_type.items())]:
        counts = {who: sum(r[who] for r in group) for who in ("rule", "expert", "stock") if who != "stock" or args.stock}
        result[name] = {**counts, "episodes": len(group),
                        "rule_over_expert": round(counts["rule"] / counts["expert"], 3) if counts["expert"] else None,
                        "rule_mean_steps_won": round(statistics.mean([r["rule_steps"] for r in group if r["rule"]]), 2)
                        if counts["rule"] else None,
                        "expert_mean_steps_won": round(statistics.mean([r["expert_steps"] for r in group
                                                                        if r["expert"]]), 2)
                        if counts["expert"] else None}
        stock = f"  stock-search expert {counts['stock']}/{len(group)}" if args.stock else ""
        print(f"{name:<24} rule {counts['rule']}/{len(group)}  expert {counts['expert']}/{len(group)}{stock}  "
              f"rule/expert {result[name]['rule_over_expert']}")
    if tokenizer is not None:
        result["prompt_tokens"] = {"memory": _spread([t for r in rows for t in r["memory_tokens"]]),
                                   "history_last2": _spread([t for r in rows for t in r["history_tokens"]]),
                                   "memory_block_alone": _spread([t for r in rows for t in r["block_tokens"]])}
        print(f"prompt tokens ({args.tokenizer}): {result['prompt_tokens']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
