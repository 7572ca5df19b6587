"""How strongly each estimator's advantages point at the right moves, on real Sokoban or maze rollouts.

    PYTHONPATH=. python benchmarks/advantage_signal.py --checkpoint RUN/warmup/hf [--iterations 3] [overrides ...]

Plays the recipe's training groups with the checkpoint (temperature 1), computes every estimator's
advantages on those very rows, and labels each step by whether its move starts a shortest solution
(breadth-first search from the state in the observation). A useful advantage is higher on optimal
moves than on the others; the gap, in units of the advantage's own standard deviation, is a
signal-to-noise figure that needs no training run. Last line: `separation gigpo=... grpo=... ratio=...`.
"""
from __future__ import annotations

import argparse
import re

import numpy as np

from gigpo.advantage.estimators import compute_advantages
from gigpo.config import load_config
from gigpo.envs.grid import MOVES
from gigpo.envs.sokoban import Room, State

_ACTION = re.compile(r"<action>(\w+)</action>")


def parse_observation(text: str) -> tuple[Room, State]:
    """A Sokoban observation back into its room and state (the outer wall is implied)."""
    rows = text.split("\n")
    walls, targets, boxes, player = set(), set(), set(), None
    for r, line in enumerate(rows):
        for c, symbol in enumerate(line):
            if symbol == "#":
                walls.add((r, c))
            if symbol in "OVS":
                targets.add((r, c))
            if symbol in "XV":
                boxes.add((r, c))
            if symbol in "PS":
                player = (r, c)
    if player is None:
        raise ValueError(f"no player in observation {text!r}")
    return Room(len(rows), len(rows[0]), frozenset(walls), frozenset(targets)), (player, frozenset(boxes))


def parse_maze(text: str):
    """A maze observation back into its layout and state. A key no longer shown was picked up; a door no
    longer shown was opened; so the player holds the key exactly when the key is gone and the door is not."""
    from gigpo.envs.maze import Layout, MazeState

    rows = text.split("\n")
    cells = {(r, c): symbol for r, line in enumerate(rows) for c, symbol in enumerate(line)}
    find = lambda symbol: next((cell for cell, s in cells.items() if s == symbol), None)  # noqa: E731
    player, key, door = find("P"), find("K"), find("D")
    if player is None:
        raise ValueError(f"no player in maze observation {text!r}")
    layout = Layout(len(rows), frozenset(cell for cell, s in cells.items() if s != "#"), find("G"), key, door)
    return layout, MazeState(player, has_key=key is None and door is not None, key_taken=key is None,
                             door_open=door is None)


def optimal_moves(text: str, env_id: str = "gigpo/Sokoban-v0") -> set[str]:
    """Moves that start a shortest solution from this state (empty when the state is lost or solved)."""
    room, state = parse_maze(text) if env_id == "gigpo/Maze-v0" else parse_observation(text)
    plan = room.solve(state)
    if not plan:
        return set()
    return {m for m in MOVES if (rest := room.solve(room.move(state, m))) is not None and len(rest) == len(plan) - 1}


def main() -> None:
    from transformers import AutoTokenizer

    from gigpo.infra.seeds import train_seeds
    from gigpo.rollout.collect import rollout
    from gigpo.advantage.rows import StepRows
    from gigpo.trainer import setup

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="HF model directory, e.g. RUN/warmup/hf")
    parser.add_argument("--recipe", default="recipes/sokoban_tiny.yaml")
    parser.add_argument("--iterations", type=int, default=3, help="training iterations' worth of groups to play")
    parser.add_argument("--variants", nargs="*", default=[], metavar="KEY=VALUE,...",
                        help="more GiGPO settings scored on the same rollouts, e.g. norm=mean step_min_spread=1.0")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(args.recipe, [*args.overrides, "logging.progress=false"])
    if config.env.id not in ("gigpo/Sokoban-v0", "gigpo/Maze-v0"):
        raise SystemExit(f"this benchmark labels moves with the Sokoban or maze solver; the recipe plays {config.env.id}")
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    pool, generator = setup.build_pool(config), setup.build_generator(config, args.checkpoint)
    prompt_fn = setup.build_prompt_fn(config, tokenizer)
    draws, episodes = [], []
    try:
        for it in range(1, args.iterations + 1):
            batch = rollout(pool, generator, prompt_fn, train_seeds(config, it), config.env.group_size,
                            setup.sampling(config, evaluation=False, seed=it), config.rollout.max_prompt_tokens,
                            group_offset=it * config.env.num_groups)
            draws.append(batch.steps)
            episodes += batch.episodes
    finally:
        generator.close()
        pool.close()
    rows = StepRows.concat(draws)
    labels = []
    for response, state in zip(rows.response_ids, rows.anchor_text):
        match = _ACTION.search(tokenizer.decode(response))
        good = optimal_moves(state, config.env.id)
        labels.append(None if not match or match.group(1) not in MOVES or not good else match.group(1) in good)
    keep = np.array([x is not None for x in labels])
    optimal = np.array([bool(x) for x in labels])
    print(f"{len(rows)} steps, {keep.sum()} with a valid move from a solvable state, {optimal.sum()} of them optimal")
    a = config.algorithm
    separation = {}
    for name in ("gigpo", "grpo", "rloo"):
        result = compute_advantages(name, rows, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight, norm=a.norm,
                                    episode_stats=a.episode_stats, similarity=a.similarity,
                                    step_min_spread=a.step_min_spread)
        adv = result.advantage
        gap = adv[keep & optimal].mean() - adv[keep & ~optimal].mean()
        separation[name] = gap / adv[keep].std()
        print(f"{name:6s} mean advantage: optimal moves {adv[keep & optimal].mean():+.3f}, others "
              f"{adv[keep & ~optimal].mean():+.3f}; gap / std = {separation[name]:.3f}")
        within = within_trajectory_separation(adv, rows, keep, optimal)
        print(f"{name:6s} within trajectories (advantage minus its trajectory's mean): gap / std = {within:.3f}")
        if name == "gigpo":
            step_part = result.step_advantage
            shared = keep & (result.step_group_size > 1)
            if shared.any() and step_part[shared].std() > 0:
                step_gap = step_part[shared & optimal].mean() - step_part[shared & ~optimal].mean()
                print(f"gigpo  step part alone, rows in step groups > 1 ({shared.sum()} rows): "
                      f"gap / std = {step_gap / step_part[shared].std():.3f}")
            won_group = _step_groups_with_a_win(rows, result, won_steps(rows, episodes))
            multi = result.step_group_size > 1
            print(f"gigpo  rows in step groups > 1 whose group holds no winning trajectory: "
                  f"{(multi & ~won_group).sum() / max(multi.sum(), 1):.1%}, carrying "
                  f"{np.abs(step_part[multi & ~won_group]).sum() / max(np.abs(step_part[multi]).sum(), 1e-12):.1%} "
                  f"of the step part's absolute mass")
    for variant in args.variants:  # GiGPO with other settings, on the very same rows
        options = dict(gamma=a.gamma, lam=a.lam, step_weight=a.step_weight, norm=a.norm, episode_stats=a.episode_stats,
                       similarity=a.similarity, step_min_spread=a.step_min_spread)
        variant_rows = rows
        for item in variant.split(","):
            key, value = item.split("=", 1)
            if key == "anchor":  # what makes two rows one step group
                variant_rows = regroup(rows, value)
                continue
            if key not in options:
                raise SystemExit(f"--variants: unknown key {key!r}; one of {', '.join(options)}")
            options[key] = type(options[key])(value) if options[key] is not None else float(value)
        adv = compute_advantages("gigpo", variant_rows, **options).advantage
        gap = (adv[keep & optimal].mean() - adv[keep & ~optimal].mean()) / adv[keep].std()
        within = within_trajectory_separation(adv, rows, keep, optimal)
        print(f"gigpo  {variant}: gap / std = {gap:.3f} (ratio to grpo {gap / separation['grpo']:.2f}), "
              f"within trajectories {within:.3f}")
    print(f"separation gigpo={separation['gigpo']:.3f} grpo={separation['grpo']:.3f} "
          f"ratio={separation['gigpo'] / separation['grpo']:.2f}")


def within_trajectory_separation(adv: np.ndarray, rows, keep: np.ndarray, optimal: np.ndarray) -> float:
    """The gap of optimal over other moves after removing each trajectory's mean advantage: the credit
    an estimator gives to one move over another of the same episode. Episode-level estimators (GRPO,
    RLOO) give every move of an episode one advantage, so theirs is 0; only a step part can move it."""
    keys = rows.group.astype(np.int64) * 1_000_003 + rows.traj.astype(np.int64)
    _, inverse = np.unique(keys, return_inverse=True)
    means = np.bincount(inverse, weights=adv) / np.bincount(inverse)
    centred = adv - means[inverse]
    spread = centred[keep].std()
    if spread < 1e-9 * max(np.abs(adv).max(), 1.0):  # constant per trajectory, up to float rounding
        return 0.0
    return float((centred[keep & optimal].mean() - centred[keep & ~optimal].mean()) / spread)


def regroup(rows, how: str):
    """The rows with other anchors. `state` as played; `state+step`: the same state at the same step
    index only (a revisit later in an episode has fewer steps left, so a lower return whatever the move);
    `first-visit`: a trajectory's later visits of a state get anchors of their own (no step group)."""
    from dataclasses import replace

    from gigpo.advantage.anchors import anchor_keys

    texts, ids = rows.anchor_text, list(zip(rows.group.tolist(), rows.traj.tolist(), rows.step.tolist()))
    if how == "state":
        return rows
    if how == "state+step":
        return replace(rows, anchor=anchor_keys([f"{t}\x00{step}" for t, (_, _, step) in zip(texts, ids)]),
                       anchor_text=None)
    if how == "first-visit":
        seen: set[tuple[int, int, str]] = set()
        keyed = []
        for t, (group, traj, step) in zip(texts, ids):
            first = (group, traj, t) not in seen
            seen.add((group, traj, t))
            keyed.append(t if first else f"{t}\x00revisit\x00{group}\x00{traj}\x00{step}")
        return replace(rows, anchor=anchor_keys(keyed), anchor_text=None)
    raise SystemExit(f"--variants: anchor={how!r}; use state, state+step or first-visit")


def won_steps(rows, episodes) -> np.ndarray:
    """Per row: did this row's trajectory end in a win."""
    won = {(e.group, e.traj): e.won for e in episodes}
    return np.array([won[key] for key in zip(rows.group.tolist(), rows.traj.tolist())])


def _step_groups_with_a_win(rows, result, won: np.ndarray) -> np.ndarray:
    """Per row: does its step group (same task group, same anchor) contain a row of a winning trajectory."""
    keys = list(zip(rows.group.tolist(), rows.anchor.tolist()))
    any_win: dict[tuple[int, int], bool] = {}
    for key, w in zip(keys, won.tolist()):
        any_win[key] = any_win.get(key, False) or w
    return np.array([any_win[k] for k in keys])


if __name__ == "__main__":
    main()
