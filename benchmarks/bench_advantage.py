"""Advantage estimators: vectorised gigpo.advantage vs the plain per-row loops, in the same run.

    PYTHONPATH=. python benchmarks/bench_advantage.py            # full: 1k..100k rows (~1 min)
    PYTHONPATH=. python benchmarks/bench_advantage.py --quick    # 1k and 10k rows

ALFWorld-shaped rows: groups of 8 trajectories of 5..50 steps, anchors drawn from a small set of
states per task (so states recur, within and across trajectories), reward 10 at the end of a
successful episode and -0.1 for some invalid actions, rows in random order, anchors pre-hashed.
Search-shaped rows (similarity grouping): groups of 8, 2..6 turns, 300-word observations that are
mostly unique (some repeated or lightly edited results), grouped at similarity 0.9; the loop there
scores pairs with rapidfuzz too (a Python LCS of two 2,000-character texts takes seconds).

Timed: building StepRows from arrays (validation included) plus the estimator, best of several runs;
the loop gets one run at large sizes. Results are checked equal before timing is reported.
The last line is `rows=100000 gigpo_ms=... naive_ms=... speedup=...`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "advantage"))
from naive_advantage import naive_advantages  # noqa: E402  (the tests' loop implementation)

from gigpo.advantage import StepRows, compute_advantages, text_similarity  # noqa: E402

ESTIMATORS = ("gigpo", "grpo", "rloo", "ppo")
OPTIONS = dict(gamma=0.95, lam=0.95, step_weight=1.0, norm="std", episode_stats="trajectory")


def alfworld_rows(n_rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Flat arrays of ALFWorld-shaped step rows (see module doc), shuffled."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("group", "traj", "step", "reward", "anchor", "value")}
    group = 0
    while len(cols["reward"]) < n_rows:
        states = rng.integers(-2**63, 2**63 - 1, size=30, dtype=np.int64)
        visit_p = 1.0 / np.arange(1, 31) ** 1.2          # a few states (start, "Nothing happens.") dominate
        visit_p /= visit_p.sum()
        for traj in range(8):
            length = int(rng.integers(5, 51))
            won = rng.random() < 0.4
            anchors = rng.choice(states, size=length, p=visit_p)
            anchors[0] = states[0]                         # every trajectory starts in the task's state
            reward = np.where(rng.random(length) < 0.1, -0.1, 0.0)
            if won:
                reward[-1] = 10.0
            cols["group"] += [group] * length
            cols["traj"] += [traj] * length
            cols["step"] += list(range(length))
            cols["reward"] += reward.tolist()
            cols["anchor"] += anchors.tolist()
            cols["value"] += rng.normal(size=length).tolist()
        group += 1
    perm = rng.permutation(len(cols["reward"]))[:n_rows]   # random arrival order; may cut trajectories short
    return {k: np.asarray(v)[perm] for k, v in cols.items()}


def search_rows(n_rows: int, seed: int = 0) -> tuple[dict[str, np.ndarray], list[str]]:
    """Search-shaped rows with 300-word observation texts (see module doc), in input order."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)))) for _ in range(20000)]
    word_p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1   # Zipf-like word frequencies
    word_p /= word_p.sum()

    def passage() -> list[str]:
        return list(rng.choice(vocab, size=300, p=word_p))

    cols: dict[str, list] = {k: [] for k in ("group", "traj", "step", "reward", "anchor", "value")}
    texts: list[str] = []
    group = 0
    while len(texts) < n_rows:
        question = passage()
        seen: list[list[str]] = []
        for traj in range(8):
            for step in range(int(rng.integers(2, 7))):
                if step == 0:
                    words = question
                elif seen and rng.random() < 0.15:                     # the same search again
                    words = seen[int(rng.integers(len(seen)))]
                elif seen and rng.random() < 0.1:                      # a lightly edited result
                    words = list(seen[int(rng.integers(len(seen)))])
                    for pos in rng.integers(0, 300, size=5):
                        words[pos] = vocab[int(rng.integers(len(vocab)))]
                else:
                    words = passage()
                seen.append(words)
                texts.append(" ".join(words))
                cols["group"].append(group)
                cols["traj"].append(traj)
                cols["step"].append(step)
                cols["reward"].append(float(rng.random() < 0.3))
                cols["anchor"].append(len(texts))
                cols["value"].append(0.0)
        group += 1
    return {k: np.asarray(v[:n_rows]) for k, v in cols.items()}, texts[:n_rows]


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def fast(estimator: str, arrays: dict[str, np.ndarray], texts=None, similarity=None):
    rows = StepRows(**arrays, anchor_text=texts)
    return compute_advantages(estimator, rows, similarity=similarity, **OPTIONS)


def naive(estimator: str, arrays: dict[str, np.ndarray], texts=None, similarity=None):
    lists = {k: v.tolist() for k, v in arrays.items()}
    if texts is not None:
        lists["anchor"] = texts
    return naive_advantages(estimator, **lists, similarity=similarity, similar=text_similarity, **OPTIONS)


def check_same(estimator: str, got, want) -> None:
    np.testing.assert_allclose(got.advantage, want["advantage"], rtol=1e-7, atol=1e-6, err_msg=estimator)
    np.testing.assert_array_equal(got.step_group_size, want["step_group_size"], err_msg=estimator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1k and 10k rows only")
    args = parser.parse_args()
    sizes = [1000, 10000] if args.quick else [1000, 3000, 10000, 30000, 100000]

    summary = ""
    for n in sizes:
        arrays = alfworld_rows(n)
        figures = []
        for estimator in ESTIMATORS:
            check_same(estimator, fast(estimator, arrays), naive(estimator, arrays))
            fast_ms = best_ms(lambda: fast(estimator, arrays), repeats=7)
            naive_ms = best_ms(lambda: naive(estimator, arrays), repeats=1 if n >= 30000 else 3)
            figures.append(f"{estimator}={fast_ms:.1f}/{naive_ms:.1f}ms")
            if estimator == "gigpo":
                summary = f"rows={n} gigpo_ms={fast_ms:.1f} naive_ms={naive_ms:.1f} speedup={naive_ms / fast_ms:.1f}"
        groups = len(np.unique(arrays["group"]))
        print(f"alfworld rows={n} groups={groups} vectorised/loop: {' '.join(figures)}", flush=True)

    arrays, texts = search_rows(3000)
    gigpo_sim = fast("gigpo", arrays, texts, similarity=0.9)
    check_same("gigpo similarity", gigpo_sim, naive("gigpo", arrays, texts, similarity=0.9))
    sim_ms = best_ms(lambda: fast("gigpo", arrays, texts, similarity=0.9), repeats=3)
    loop_ms = best_ms(lambda: naive("gigpo", arrays, texts, similarity=0.9), repeats=1)
    sizes = gigpo_sim.step_group_size
    print(f"search rows={len(texts)} chars/text={np.mean([len(t) for t in texts]):.0f} similarity=0.9 "
          f"step_groups={int(np.sum(1.0 / sizes))} singleton_rows={np.mean(sizes == 1):.2f} "
          f"gigpo_ms={sim_ms:.0f} loop_with_rapidfuzz_ms={loop_ms:.0f} speedup={loop_ms / sim_ms:.1f}", flush=True)
    print(summary)


if __name__ == "__main__":
    main()
