"""HGPO and GraphGPO: gigpo.advantage against the reference recipes of verl-agent, equality and speed.

    PYTHONPATH=. python benchmarks/bench_successors.py --reference /tmp/alfworldauto          # 1k, 10k, 100k
    PYTHONPATH=. python benchmarks/bench_successors.py --reference /tmp/alfworldauto --sizes 1000 10000

--reference is a checkout of a verl-agent tree that has recipe/hgpo/core_hgpo.py, recipe/GraphGPO/core_graph.py
and gigpo/core_gigpo.py (e.g. github.com/zzj1111/alfworldauto); nothing of it is copied into this project.
The reference modules are loaded from that path at run time. They import `verl` only for a type hint
(DataProto); a stand-in module is put in its place, and their batches are plain namespaces holding the
arrays they read. Their `gigpo.core_gigpo` (GraphGPO's GiGPO primitives) is loaded from the checkout under
that module name, beside this project's `gigpo` package, which has no such module.

Rows: ALFWorld-shaped (benchmarks/bench_advantage.py's generator: groups of 8 trajectories of 5-50 steps,
recurring anchors, reward 10 on success, -0.1 penalties), handed to the reference in its batch layout
(each trajectory's rows together, in step order) and to gigpo.advantage shuffled. Compared with the
reference's options mapped onto ours: mode mean_std_norm = norm "std"; the reference's episode statistics
over step rows = episode_stats "steps"; GraphGPO's next observation of a trajectory's last step = "success"
when its episode reward is > 0, else an observation of its own. Similarity merging is not compared (the
reference scores pairs with difflib's SequenceMatcher, this project with an LCS ratio).

Timed: the reference's whole path (step returns, graph and distances, advantages), once per size, against
StepRows construction plus the estimator, best of --repeats (5). Prints one line per estimator and size:
`variant=hgpo_k2_episode rows=10000 max_abs_diff=... ref_s=... ours_s=... speedup=...`.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_advantage import alfworld_rows  # noqa: E402

from gigpo.advantage import StepRows, compute_advantages  # noqa: E402

GAMMA = 0.95        # HGPO's discount of step returns (the reference scripts' algorithm.gamma)
GRAPH_GAMMA = 0.1   # GraphGPO's (its ALFWorld script's algorithm.gamma)


def load_reference(root: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """core_hgpo and core_graph from a verl-agent checkout, with `verl` stood in for."""
    verl = types.ModuleType("verl")
    verl.DataProto = type("DataProto", (), {})   # only used in annotations by the reference's functions
    sys.modules.setdefault("verl", verl)

    def load(name: str, path: Path) -> types.ModuleType:
        if not path.is_file():
            raise SystemExit(f"--reference {root}: {path.relative_to(root)} is missing; pass a verl-agent checkout "
                             "with recipe/hgpo and recipe/GraphGPO (e.g. zzj1111/alfworldauto)")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    load("gigpo.core_gigpo", root / "gigpo" / "core_gigpo.py")
    return load("ref_core_hgpo", root / "recipe" / "hgpo" / "core_hgpo.py"), \
        load("ref_core_graph", root / "recipe" / "GraphGPO" / "core_graph.py")


def reference_batch(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, Any]:
    """The rows in the reference's layout (sorted by group, trajectory, step) as a namespace batch, and the
    permutation from our row order to it. Ids and anchors are int64 arrays, not verl's object arrays: the
    reference's per-row `np.where(ids == id)` scans are then several times faster, which favours the reference."""
    import torch

    order = np.lexsort((arrays["step"], arrays["traj"], arrays["group"]))
    group, traj, reward = arrays["group"][order], arrays["traj"][order], arrays["reward"][order]
    anchor = arrays["anchor"][order]
    traj_uid = group * 1000 + traj
    uniq, inverse = np.unique(traj_uid, return_inverse=True)
    episode = np.bincount(inverse, weights=reward)[inverse]           # each row: its trajectory's R(tau)
    last = np.r_[traj_uid[1:] != traj_uid[:-1], True]
    next_obs = np.empty(len(order), dtype=object)
    next_obs[:-1] = anchor[1:]
    next_obs[last] = [("success" if e > 0 else f"end-{t}") for e, t in zip(episode[last], traj_uid[last])]
    n = len(order)
    batch = types.SimpleNamespace(
        non_tensor_batch={
            "rewards": reward, "traj_uid": traj_uid, "uid": group,
            "active_masks": np.ones(n, dtype=bool), "anchor_obs": anchor, "next_obs": next_obs,
            "text_actions": np.full(n, "act", dtype=object), "episode_rewards": episode,
            "is_action_valid": np.ones(n, dtype=bool),
        },
        batch={"input_ids": torch.zeros(1)},
    )
    return order, batch


VARIANTS = {   # label: (estimator, our options; the reference gets the same values under its names)
    "hgpo_k2_episode": ("hgpo", dict(hgpo_history=2, hgpo_alpha=1.0, hgpo_episode_group=True)),
    "hgpo_k4_alpha0.5": ("hgpo", dict(hgpo_history=4, hgpo_alpha=0.5, hgpo_episode_group=False)),
    "graphgpo_absolute": ("graphgpo", dict(graph_distance="absolute")),
    "graphgpo_delta": ("graphgpo", dict(graph_distance="delta")),
}


def reference_hgpo(ref, batch, options: dict) -> np.ndarray:
    import torch

    nt = batch.non_tensor_batch
    step_rewards = ref.compute_step_discounted_returns(batch, GAMMA)
    scores = torch.tensor(nt["episode_rewards"], dtype=torch.float32)[:, None]
    adv, _ = ref.compute_hgpo_outcome_advantage(scores, step_rewards, torch.ones_like(scores), nt["anchor_obs"],
                                                nt["uid"], nt["traj_uid"], options["hgpo_history"],
                                                mode="mean_std_norm", length_weight_alpha=options["hgpo_alpha"],
                                                base_group=options["hgpo_episode_group"])
    return adv[:, 0].numpy()


def reference_graphgpo(ref, batch, options: dict) -> np.ndarray:
    import torch

    nt = batch.non_tensor_batch
    graphs = ref.ComplexGraph.from_data(batch, enable_similarity=False)
    ref.ComplexGraph.Calculate_all_shortest_path(graphs)
    step_rewards = ref.compute_graph_path_returns(batch, graphs, GRAPH_GAMMA,
                                                  normalize_distance=options["graph_distance"] == "delta")
    scores = torch.tensor(nt["episode_rewards"], dtype=torch.float32)[:, None]
    adv, _ = ref.compute_graphgpo_outcome_advantage(scores, step_rewards, torch.ones_like(scores), nt["anchor_obs"],
                                                    nt["uid"], nt["traj_uid"], step_advantage_w=1.0,
                                                    episode_advantage_w=1.0, mode="mean_std_norm")
    return adv[:, 0].numpy()


def ours(estimator: str, arrays: dict[str, np.ndarray], options: dict) -> StepRows:
    rows = StepRows(group=arrays["group"], traj=arrays["traj"], step=arrays["step"], reward=arrays["reward"],
                    anchor=arrays["anchor"])
    return compute_advantages(estimator, rows, gamma=GAMMA, lam=0.95, step_weight=1.0, norm="std",
                              episode_stats="steps", similarity=None, graph_gamma=GRAPH_GAMMA,
                              graph_episode_weight=1.0, **options)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, type=Path, help="a verl-agent checkout with the recipes")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--repeats", type=int, default=5, help="runs of gigpo.advantage, best taken (default: 5)")
    args = parser.parse_args()
    references = dict(zip(("hgpo", "graphgpo"), load_reference(args.reference.resolve())))
    run_reference = {"hgpo": reference_hgpo, "graphgpo": reference_graphgpo}
    for n in args.sizes:
        arrays = alfworld_rows(n, seed=n)
        order, batch = reference_batch(arrays)
        for label in args.variants.split(","):
            estimator, options = VARIANTS[label]
            with contextlib.redirect_stdout(io.StringIO()):        # the reference prints per call
                want, ref_s = timed(lambda: run_reference[estimator](references[estimator], batch, options), 1)
            got, ours_s = timed(lambda: ours(estimator, arrays, options), args.repeats)
            diff = np.abs(got.advantage[order] - want)
            off = diff > 1e-4
            # GraphGPO: step groups whose graph returns are all equal get exactly 0 here; the reference's float32
            # mean of equal values can round off them, and (x - mean) / (std + 1e-6) turns that into up to ~1e-2.
            equal = ((got.step_group_size > 1) & (got.step_advantage == 0.0))[order] if estimator == "graphgpo" \
                else np.zeros(n, dtype=bool)
            rest = diff[~equal].max() if (~equal).any() else 0.0
            print(f"variant={label} rows={n} max_abs_diff={diff.max():.3g} max_abs_value={np.abs(want).max():.3g} "
                  f"rows_off_1e-4={int(off.sum())} of_them_in_equal_return_groups={int((off & equal).sum())} "
                  f"max_abs_diff_elsewhere={rest:.3g} ref_s={ref_s:.3f} ours_s={ours_s:.4f} "
                  f"speedup={ref_s / ours_s:.0f}x", flush=True)


if __name__ == "__main__":
    main()
