"""End-to-end training throughput of `sokoban_tiny` against a bare PyTorch loop doing the same job.

    PYTHONPATH=. python benchmarks/bench_throughput.py [--iterations 6] [--baseline-tree DIR] [overrides ...]

1. gigpo: `gigpo train recipes/sokoban_tiny.yaml` for a few iterations (its warm-up comes from the
   cache after the first run), per-phase times from its metrics. With `--baseline-tree DIR` the same
   run is repeated with another checkout's code first on the path (e.g. a worktree of an older
   commit), back to back, so a speed-up is measured on one machine in one sitting.
2. bare: the speed-of-light reference, written here in plain PyTorch: the same warmed-up model and
   tokenizer, the same Sokoban env class, groups and sampling settings, GiGPO's advantages, a PPO-clip
   update with the KL term to a frozen copy, Adam, mini-batches of the recipe's size. One process: no
   DeepSpeed, no env pool, no `generate` (a hand-written KV-cache sampling loop), old log-probs taken
   from sampling, prompts cached by observation, tokens drawn by inverse CDF as gigpo's HF generator does.

The first iteration of each is left out (allocator and kernel warm-up). Env steps/s counts steps
played divided by the iterations' time without evaluation. Last line:
`gigpo_env_steps_s=... bare_env_steps_s=... ratio=...` (the goal: ratio >= 0.5) and, with a baseline,
`speedup=...` over it. The load average is printed with the figures: on 2 cores any other job skews them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
RECIPE = "recipes/sokoban_tiny.yaml"
PHASES = ("time/generate", "time/env", "time/logprobs", "time/advantage", "time/update", "time/sync")
QUIET = ["logging.wandb_mode=disabled", "logging.progress=false", "trainer.eval_every=1000000", "env.eval_episodes=8"]


# --------------------------------------------------------------------------- gigpo, as a user runs it

def gigpo_run(tree: Path, iterations: int, overrides: list[str], run_dir: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "gigpo.cli", "train", RECIPE, *QUIET, *overrides, f"trainer.iterations={iterations}",
           f"trainer.run_dir={run_dir}", f"trainer.save_every={iterations}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["iteration"] > 1]  # iteration 0 is the start's evaluation, 1 warms up


def summarise(records: list[dict]) -> dict[str, float]:
    seconds = sum(r["time/iteration"] - r.get("time/eval", 0.0) for r in records)
    steps = sum(r["rollout/env_steps"] for r in records)
    out = {"env_steps_s": steps / seconds, "tokens_s": sum(r["rollout/tokens_generated"] for r in records) / seconds,
           "iteration_s": seconds / len(records), "env_steps": steps / len(records)}
    for phase in PHASES:
        out[phase] = sum(r.get(phase, 0.0) for r in records) / len(records)
    return out


# --------------------------------------------------------------------------- the bare loop

class BareLoop:
    """GiGPO on Sokoban in plain PyTorch: the least work the job needs on this machine."""

    def __init__(self, model_dir: str, config) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from gigpo.envs.sokoban import SokobanEnv

        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.trainer.lr)
        self.end_ids = {self.tokenizer.convert_tokens_to_ids("<|im_end|>"), self.tokenizer.eos_token_id}
        e = config.env
        self.envs = [SokobanEnv(invalid_action_penalty=e.invalid_action_penalty, **e.kwargs)
                     for _ in range(e.num_groups * e.group_size)]
        self.prompt_cache: dict[str, list[int]] = {}

    def prompt(self, observation: str) -> list[int]:
        ids = self.prompt_cache.get(observation)
        if ids is None:
            ids = self.tokenizer.apply_chat_template([{"role": "user", "content": observation}], tokenize=True,
                                                     add_generation_prompt=True, return_dict=False)
            self.prompt_cache[observation] = ids = list(ids)
        return ids

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], max_new: int) -> tuple[list[list[int]], list[list[float]]]:
        """Temperature-1 sampling with a KV cache; returns response ids (up to the end token) and their log-probs."""
        from transformers import DynamicCache

        from gigpo.rollout.hf_backend import inverse_cdf_draw  # multinomial cost ~2 ms per call here

        width = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        mask = torch.zeros(len(prompts), width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        position = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=position, past_key_values=cache,
                            use_cache=True).logits[:, -1]
        out, logps = [[] for _ in prompts], [[] for _ in prompts]
        live = torch.ones(len(prompts), dtype=torch.bool)
        for _ in range(max_new):
            logp = torch.log_softmax(logits.float(), -1)
            token = inverse_cdf_draw(logits.float(), torch.rand(len(prompts), dtype=torch.float64))
            chosen = logp.gather(-1, token[:, None])[:, 0]
            for i in torch.nonzero(live)[:, 0].tolist():
                out[i].append(int(token[i]))
                logps[i].append(float(chosen[i]))
                if int(token[i]) in self.end_ids:
                    live[i] = False
            if not live.any():
                break
            mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=torch.long)], 1)
            position = position[:, -1:] + 1
            logits = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=position,
                                past_key_values=cache, use_cache=True).logits[:, -1]
        return out, logps

    def rollout(self, seeds: list[int]) -> tuple[list[dict], float, float]:
        e = self.config.env
        obs = {}
        for k, env in enumerate(self.envs):
            obs[k] = env.reset(seed=seeds[k // e.group_size])[0]
        steps, t_gen, t_env = [], 0.0, 0.0
        live = list(range(len(self.envs)))
        for turn in range(e.max_steps):
            if not live:
                break
            t0 = time.perf_counter()
            prompts = [self.prompt(obs[k]) for k in live]
            responses, logps = self.sample(prompts, self.config.rollout.max_new_tokens)
            t1 = time.perf_counter()
            still = []
            for k, prompt, response, logp in zip(live, prompts, responses, logps):
                text = self.tokenizer.decode(response, skip_special_tokens=True)
                anchor = obs[k]
                obs[k], reward, terminated, _, _ = self.envs[k].step(text)
                steps.append({"group": k // e.group_size, "traj": k, "step": turn, "prompt": prompt, "response": response,
                              "logp": logp, "reward": reward, "anchor": anchor})
                if not terminated and turn + 1 < e.max_steps:
                    still.append(k)
            live = still
            t_gen, t_env = t_gen + t1 - t0, t_env + time.perf_counter() - t1
        return steps, t_gen, t_env

    def advantages(self, steps: list[dict]) -> np.ndarray:
        from gigpo.advantage.anchors import anchor_keys
        from gigpo.advantage.estimators import compute_advantages
        from gigpo.advantage.rows import StepRows

        a = self.config.algorithm
        rows = StepRows(group=np.array([s["group"] for s in steps]), traj=np.array([s["traj"] for s in steps]),
                        step=np.array([s["step"] for s in steps]), reward=np.array([s["reward"] for s in steps]),
                        anchor=anchor_keys(s["anchor"] for s in steps))
        return compute_advantages("gigpo", rows, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight, norm=a.norm,
                                  episode_stats=a.episode_stats, similarity=None).advantage

    @staticmethod
    def batch(chunk: list[dict]) -> tuple[torch.Tensor, ...]:
        """Right-padded rows; response token j of row i is predicted at column len(prompt) - 1 + j."""
        width = max(len(s["prompt"]) + len(s["response"]) for s in chunk)
        rmax = max(len(s["response"]) for s in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        attention = torch.zeros(len(chunk), width, dtype=torch.long)
        cols = torch.zeros(len(chunk), rmax, dtype=torch.long)
        targets = torch.zeros(len(chunk), rmax, dtype=torch.long)
        mask = torch.zeros(len(chunk), rmax)
        for i, s in enumerate(chunk):
            seq, p, r = s["prompt"] + s["response"], len(s["prompt"]), len(s["response"])
            ids[i, :len(seq)] = torch.tensor(seq)
            attention[i, :len(seq)] = 1
            cols[i, :r] = torch.arange(p - 1, p - 1 + r)
            targets[i, :r] = torch.tensor(s["response"])
            mask[i, :r] = 1
        return ids, attention, cols, targets, mask

    @staticmethod
    def logp(model, ids, attention, cols, targets) -> torch.Tensor:
        hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state  # (B, W, H)
        picked = hidden.gather(1, cols[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, R, H)
        return torch.log_softmax(model.lm_head(picked).float(), -1).gather(-1, targets[..., None])[..., 0]

    def update(self, steps: list[dict], advantages: np.ndarray) -> tuple[float, float]:
        """One epoch of PPO-clip over shuffled mini-batches; returns (reference seconds, update seconds)."""
        t, a = self.config.trainer, self.config.algorithm
        order = np.random.default_rng(0).permutation(len(steps))
        t_ref = t_upd = 0.0
        size = t.mini_batch_size or -(-len(steps) // t.mini_batches)  # as many optimizer steps as gigpo takes
        for start in range(0, len(steps), size):
            chunk = [steps[i] for i in order[start:start + size]]
            adv = torch.tensor([float(advantages[i]) for i in order[start:start + size]])[:, None]
            ids, attention, cols, targets, mask = self.batch(chunk)
            old = torch.zeros_like(mask)
            for i, s in enumerate(chunk):
                old[i, :len(s["logp"])] = torch.tensor(s["logp"])
            t0 = time.perf_counter()
            with torch.no_grad():
                ref = self.logp(self.reference, ids, attention, cols, targets)
            t1 = time.perf_counter()
            logp = self.logp(self.model, ids, attention, cols, targets)
            ratio = torch.exp(logp - old)
            pg = -torch.minimum(ratio * adv, ratio.clamp(1 - a.clip_low, 1 + a.clip_high) * adv)
            kl = torch.exp(ref - logp) - (ref - logp) - 1
            loss = ((pg + a.kl_coef * kl) * mask).sum() / mask.sum()
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
            self.optimizer.step()
            t_ref, t_upd = t_ref + t1 - t0, t_upd + time.perf_counter() - t1
        return t_ref, t_upd

    def run(self, iterations: int) -> list[dict]:
        from gigpo.infra.seeds import train_seeds

        records = []
        torch.manual_seed(0)
        for iteration in range(1, iterations + 1):
            start = time.perf_counter()
            steps, t_gen, t_env = self.rollout(train_seeds(self.config, iteration))
            t0 = time.perf_counter()
            advantages = self.advantages(steps)
            t_adv = time.perf_counter() - t0
            t_ref, t_upd = self.update(steps, advantages)
            records.append({"iteration": iteration, "time/iteration": time.perf_counter() - start,
                            "rollout/env_steps": len(steps), "rollout/tokens_generated": sum(len(s["response"]) for s in steps),
                            "time/generate": t_gen, "time/env": t_env, "time/logprobs": t_ref, "time/advantage": t_adv,
                            "time/update": t_upd})
        return records[1:]


# --------------------------------------------------------------------------- report

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to time the same gigpo run with")
    parser.add_argument("overrides", nargs="*", help="recipe overrides for the gigpo runs (section.key=value)")
    args = parser.parse_args()
    from gigpo.config import load_config

    config = load_config(REPO / RECIPE, args.overrides)
    results: dict[str, dict[str, float]] = {}
    loads: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = [("gigpo", REPO)] + ([("baseline", args.baseline_tree.resolve())] if args.baseline_tree else [])
        for name, tree in trees:
            run_dir = Path(tmp) / name
            results[name] = summarise(gigpo_run(tree, args.iterations, args.overrides, run_dir))
            loads.append(f"{name}: {os.getloadavg()[0]:.2f}")
        torch.set_num_threads(torch.get_num_threads())
        bare = BareLoop(str(Path(tmp) / "gigpo" / "warmup" / "hf"), config)
        results["bare"] = summarise(bare.run(args.iterations))
        loads.append(f"bare: {os.getloadavg()[0]:.2f}")
    names = list(results)
    print(f"sokoban_tiny, iterations 2..{args.iterations} of each run; load average (1 min) after each: {', '.join(loads)}")
    print(f"{'figure':<18}" + "".join(f"{n:>12}" for n in names))
    for key in ("env_steps_s", "tokens_s", "env_steps", "iteration_s", *PHASES):
        print(f"{key:<18}" + "".join(f"{results[n].get(key, 0.0):>12.3f}" for n in names))
    g, b = results["gigpo"]["env_steps_s"], results["bare"]["env_steps_s"]
    line = f"gigpo_env_steps_s={g:.1f} bare_env_steps_s={b:.1f} ratio={g / b:.2f}"
    if "baseline" in results:
        line += f" baseline_env_steps_s={results['baseline']['env_steps_s']:.1f} speedup={g / results['baseline']['env_steps_s']:.2f}"
    print(line)


if __name__ == "__main__":
    main()
