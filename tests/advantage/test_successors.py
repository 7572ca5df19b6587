"""HGPO and GraphGPO: hand-computed cases from the papers' definitions (each also shown to differ from
GiGPO's result), the plain-loop spec on random batches, options, and `gigpo advantage` on logged rows."""
from __future__ import annotations

import math

import numpy as np
import pytest
from batches import ANY_REWARDS, batches
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_successors import naive_graphgpo, naive_hgpo
from test_cli_and_io import ROWS as LOGGED  # a dump of two tasks' rows: string ids, text anchors, out of order
from test_cli_and_io import write_jsonl

from gigpo.advantage import AdvantageInputError, StepRows, anchor_keys, compute_advantages
from gigpo.advantage import read_advantages
from gigpo.advantage.estimators import successor_options
from gigpo.cli import main
from gigpo.config import AlgorithmConfig
from support.tolerance import normalised_tolerance

EPS = 1e-6
# the successors' options come from AlgorithmConfig, where their defaults live (AdvantageOptions has none)
BASE = dict(gamma=1.0, lam=0.95, step_weight=1.0, norm="std", episode_stats="trajectory", similarity=None,
            **successor_options(AlgorithmConfig()))
TOLERANCE = normalised_tolerance(magnitude=10 * 3 * 6, terms=4 * 4 * 6)


def run(estimator: str, rows: StepRows, **overrides):
    return compute_advantages(estimator, rows, **{**BASE, **overrides})


def zscores(values: list[float], ddof: int) -> np.ndarray:
    """(v - mean) / (std + 1e-6) with the population (ddof=0) or unbiased (ddof=1) std."""
    v = np.asarray(values, dtype=float)
    return (v - v.mean()) / (v.std(ddof=ddof) + EPS)


# --------------------------------------------------------------------------- HGPO by hand

# Three trajectories of one task reach state 3, two of them from state 1 and one from state 2.
# gamma = 1: returns R_t = 10, 10 | 0, 0 | 4, 4.
SHARED_STATE = StepRows(group=[0] * 6, traj=[0, 0, 1, 1, 2, 2], step=[0, 1] * 3,
                        reward=[0, 10, 0, 0, 0, 4], anchor=[1, 3, 2, 3, 1, 3])


def test_hgpo_a_shared_state_at_different_histories():
    out = run("hgpo", SHARED_STATE, hgpo_history=2, hgpo_alpha=1.0)
    # k=1 groups: state 3 holds R = 10, 0, 4 (population std); state 1 holds 10, 4; state 2 is alone.
    # k=2 groups: (1, 3) holds rows of traj 0 and 2 (R = 10, 4, as state 1); (2, 3) is alone. Weights L = k + 1.
    z3 = zscores([10, 0, 4], ddof=0)
    z1 = zscores([10, 4], ddof=0)
    np.testing.assert_allclose(z1, [1.0, -1.0], atol=1e-6)
    want = [
        2 * z1[0] / (2 + EPS), (2 * z3[0] + 3 * z1[0]) / (5 + EPS),
        0.0, 2 * z3[1] / (2 + EPS),                        # traj 1's history (2, 3) is nobody else's
        2 * z1[1] / (2 + EPS), (2 * z3[2] + 3 * z1[1]) / (5 + EPS),
    ]
    np.testing.assert_allclose(out.advantage, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out.step_group_size, [2, 3, 1, 3, 2, 3])
    np.testing.assert_allclose(out.returns, [10, 10, 0, 0, 4, 4])
    # GiGPO on the same rows (unbiased std, no history, plus the episode part) is another number.
    assert not np.allclose(run("gigpo", SHARED_STATE).advantage, want, atol=1e-3)


def test_hgpo_weights_alpha_and_the_episode_group():
    out = run("hgpo", SHARED_STATE, hgpo_alpha=0.0, hgpo_episode_group=True)
    z3, z1 = zscores([10, 0, 4], ddof=0), zscores([10, 4], ddof=0)
    episode = zscores([10, 0, 4], ddof=1)          # GiGPO's episode part: R(tau) = 10, 0, 4, unbiased std
    # alpha = 0: every group weighs 1; the episode group joins with weight 1.
    want_row1 = (z3[0] + z1[0] + episode[0]) / (3 + EPS)
    want_row0 = (z1[0] + episode[0]) / (2 + EPS)
    want_row2 = episode[1] / (1 + EPS)             # state 2 alone: only the episode group
    np.testing.assert_allclose(out.advantage[[1, 0, 2]], [want_row1, want_row0, want_row2], rtol=1e-12)
    np.testing.assert_allclose(out.episode_advantage, np.repeat(episode, 2), rtol=1e-12)
    np.testing.assert_allclose(out.step_advantage[1], (z3[0] + z1[0]) / (2 + EPS), rtol=1e-12)
    assert not np.isclose(run("gigpo", SHARED_STATE).advantage[1], want_row1, atol=1e-3)


def test_hgpo_leaves_out_groups_that_carry_no_signal():
    # Trajectories 0 and 1 both go 1 -> 3 and win 10; trajectory 2 goes 2 -> 3 and fails. The history
    # group (1, 3) holds 10, 10: value 0, left out, so row 1 gets the state-3 value alone, not 2/5 of it.
    rows = StepRows(group=[0] * 6, traj=[0, 0, 1, 1, 2, 2], step=[0, 1] * 3,
                    reward=[0, 10, 0, 10, 0, 0], anchor=[1, 3, 1, 3, 2, 3])
    out = run("hgpo", rows)
    z3 = zscores([10, 10, 0], ddof=0)
    np.testing.assert_allclose(out.advantage[[1, 3, 5]], 2 * z3 / (2 + EPS), rtol=1e-12)
    np.testing.assert_array_equal(out.advantage[[0, 2, 4]], 0.0)   # state 1: 10, 10; state 2 alone
    assert not np.allclose(run("gigpo", rows).advantage[[1, 3, 5]], 2 * z3 / (2 + EPS), atol=1e-3)


def test_hgpo_history_depth_adds_longer_keys():
    # One task, three trajectories of three steps: 5 -> 1 -> 3, 6 -> 1 -> 3, 5 -> 1 -> 3 (returns 9, 0, 3).
    rows = StepRows(group=[0] * 9, traj=np.repeat([0, 1, 2], 3), step=[0, 1, 2] * 3,
                    reward=[0, 0, 9, 0, 0, 0, 0, 0, 3], anchor=[5, 1, 3, 6, 1, 3, 5, 1, 3])
    z_all = zscores([9, 0, 3], ddof=0)                       # k=1 and k=2: (3) and (1, 3) hold all three
    z_two = zscores([9, 3], ddof=0)                          # k=3: (5, 1, 3) holds traj 0 and 2
    shallow = run("hgpo", rows, hgpo_history=1)
    deep = run("hgpo", rows, hgpo_history=2)
    np.testing.assert_allclose(shallow.advantage[2], (2 + 3) * z_all[0] / (5 + EPS), rtol=1e-12)
    np.testing.assert_allclose(deep.advantage[2], ((2 + 3) * z_all[0] + 4 * z_two[0]) / (9 + EPS), rtol=1e-12)
    np.testing.assert_allclose(deep.advantage[5], (2 + 3) * z_all[1] / (5 + EPS), rtol=1e-12)  # (6,1,3): alone


# --------------------------------------------------------------------------- GraphGPO by hand

# States: S=1 start, A=2, B=3, C=4. Two routes to the goal: S -> A -> goal and S -> B -> C -> goal; a loop
# A -> S -> A; a self-loop B -> B. Traj 0: S A S A (wins), traj 1: S B C (wins), traj 2: S B B (fails).
S, A, B, C = 1, 2, 3, 4
LOOP_GRAPH = StepRows(group=[0] * 10, traj=[0, 0, 0, 0, 1, 1, 1, 2, 2, 2], step=[0, 1, 2, 3, 0, 1, 2, 0, 1, 2],
                      reward=[0, 0, 0, 10, 0, 0, 10, 0, 0, 0], anchor=[S, A, S, A, S, B, C, S, B, B])
# Distances to the goal: A 1, C 1, S 2 (via A), B 2 (via C); traj 2's dead end: unreachable, 2 + 1 = 3.
D_STATE = [2, 1, 2, 1, 2, 2, 1, 2, 2, 2]
D_NEXT = [1, 2, 1, 0, 2, 1, 0, 2, 2, 3]


def graph_step_part(returns: list[float]) -> np.ndarray:
    """Returns normalised in LOOP_GRAPH's exact-anchor step groups (unbiased std; C's group of one: 0)."""
    out = np.zeros(10)
    for rows in ([0, 2, 4, 7], [1, 3], [5, 8, 9]):
        out[rows] = zscores([returns[i] for i in rows], ddof=1)
    return out


def test_graphgpo_a_loop_and_two_routes_to_the_goal():
    out = run("graphgpo", LOOP_GRAPH, graph_gamma=0.5)
    returns = [10 * 0.5 ** d for d in D_NEXT]
    np.testing.assert_allclose(out.returns, [5, 2.5, 5, 10, 2.5, 5, 10, 2.5, 2.5, 1.25])
    np.testing.assert_allclose(out.returns, returns)
    episode = np.repeat(zscores([10, 10, 0], ddof=1), [4, 3, 3])
    step = graph_step_part(returns)
    np.testing.assert_allclose(out.step_advantage, step, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.advantage, step + episode, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out.step_group_size, [4, 2, 4, 2, 4, 3, 1, 4, 3, 3])
    # In the failed trajectory, stepping S -> B (towards C) beats the self-loop and the dead end:
    assert out.step_advantage[8] > out.step_advantage[9]
    assert not np.allclose(run("gigpo", LOOP_GRAPH, gamma=0.5).advantage, step + episode, atol=1e-3)


def test_graphgpo_delta_distance_and_weights():
    out = run("graphgpo", LOOP_GRAPH, graph_gamma=0.5, graph_distance="delta", step_weight=0.5,
              graph_episode_weight=0.0, norm="mean")
    returns = [10 * 0.5 ** (n - s + 1) for n, s in zip(D_NEXT, D_STATE)]
    np.testing.assert_allclose(out.returns, [10, 2.5, 10, 10, 5, 10, 10, 5, 5, 2.5])
    np.testing.assert_allclose(out.returns, returns)
    centred = np.zeros(10)
    for rows in ([0, 2, 4, 7], [1, 3], [5, 8, 9]):
        centred[rows] = np.asarray(returns)[rows] - np.mean(np.asarray(returns)[rows])
    np.testing.assert_allclose(out.advantage, 0.5 * centred, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out.episode_advantage, 0.0)
    assert not np.allclose(run("gigpo", LOOP_GRAPH, step_weight=0.5, norm="mean").advantage, 0.5 * centred, atol=1e-3)


def test_graphgpo_group_without_success_gets_only_its_episode_part():
    # Maze-like penalties: nobody reaches the goal; trajectories differ in length, so R(tau) differ.
    rows = StepRows(group=[0] * 5, traj=[0, 0, 1, 1, 1], step=[0, 1, 0, 1, 2],
                    reward=[-0.1] * 5, anchor=[1, 2, 1, 2, 3])
    out = run("graphgpo", rows, graph_gamma=0.1)
    np.testing.assert_allclose(out.returns, 10 * 0.1)         # every state equally unreachable: d = 0 + 1
    np.testing.assert_array_equal(out.step_advantage, 0.0)
    episode = np.repeat(zscores([-0.2, -0.3], ddof=1), [2, 3])
    np.testing.assert_allclose(out.advantage, episode, rtol=1e-12)
    # gigpo's step part sees the penalties' discounted returns and is not 0 here
    assert not np.allclose(run("gigpo", rows, gamma=0.95).advantage, episode, atol=1e-3)


def test_graphgpo_goal_return_sets_what_counts_as_success():
    # Traj 0 ends with 0.5 (a partial score), traj 1 with 0: with the reference's "> 0" traj 0 reached
    # the goal; with graph_goal_return=0.5 nobody did and the step part vanishes.
    rows = StepRows(group=[0] * 4, traj=[0, 0, 1, 1], step=[0, 1] * 2, reward=[0, 0.5, 0, 0], anchor=[1, 2, 1, 3])
    assert np.any(run("graphgpo", rows).step_advantage != 0.0)
    np.testing.assert_array_equal(run("graphgpo", rows, graph_goal_return=0.5).step_advantage, 0.0)


def test_graphgpo_similarity_merges_graph_nodes_but_step_groups_stay_exact():
    # Traj 1's "room b." is a near-copy of traj 0's "room b", from which the goal is one step away.
    texts = ["room a", "room b", "room a", "room b.", "room a", "room c"]
    rows = StepRows(group=[0] * 6, traj=[0, 0, 1, 1, 2, 2], step=[0, 1] * 3, reward=[0, 10, 0, 0, 0, 0],
                    anchor=anchor_keys(texts), anchor_text=texts)
    exact = run("graphgpo", rows, graph_gamma=0.5)
    merged = run("graphgpo", rows, graph_gamma=0.5, similarity=0.9)
    # exact: d(room b) = 1, d(room a) = 2; "room b." and "room c" cannot reach the goal: 2 + 1
    np.testing.assert_allclose(exact.returns, [5, 10, 1.25, 1.25, 1.25, 1.25])
    # merged: "room b." is "room b" (d = 1), and its own last step now leaves a node that reaches the goal
    np.testing.assert_allclose(merged.returns, [5, 10, 5, 1.25, 1.25, 1.25])
    np.testing.assert_array_equal(merged.step_group_size, [3, 1, 3, 1, 3, 1])
    with pytest.raises(AdvantageInputError, match="anchor_text"):
        run("graphgpo", StepRows(group=[0], traj=[0], step=[0], reward=[1.0], anchor=[1]), similarity=0.9)


# --------------------------------------------------------------------------- the loop spec, random batches

HGPO_OPTIONS = st.fixed_dictionaries({
    "gamma": st.sampled_from([0.0, 0.5, 0.95, 1.0]), "norm": st.sampled_from(["std", "mean"]),
    "episode_stats": st.sampled_from(["trajectory", "steps"]), "hgpo_history": st.integers(0, 3),
    "hgpo_alpha": st.sampled_from([0.0, 1.0, 2.5]), "hgpo_episode_group": st.booleans(),
})
GRAPH_OPTIONS = st.fixed_dictionaries({
    "step_weight": st.sampled_from([0.0, 0.4, 1.0]), "norm": st.sampled_from(["std", "mean"]),
    "episode_stats": st.sampled_from(["trajectory", "steps"]), "graph_gamma": st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    "graph_episode_weight": st.sampled_from([0.0, 1.0]), "graph_distance": st.sampled_from(["absolute", "delta"]),
    "graph_goal_return": st.sampled_from([0.0, 0.7]),
})
OUTPUTS = ("advantage", "episode_advantage", "step_advantage", "returns")


def _check(got: StepRows, want: dict) -> None:
    for name in OUTPUTS:
        np.testing.assert_allclose(getattr(got, name), want[name], rtol=0, atol=TOLERANCE, err_msg=name)
    np.testing.assert_array_equal(got.step_group_size, want["step_group_size"])


@settings(max_examples=30, deadline=None)
@given(batch=batches(), options=HGPO_OPTIONS)
def test_hgpo_matches_the_loop_spec(batch, options):
    got = compute_advantages("hgpo", batch.rows(), lam=0.9, step_weight=1.0, similarity=None, **options)
    want = naive_hgpo(batch.group, batch.traj, batch.step, batch.reward, batch.anchor, gamma=options["gamma"],
                      norm=options["norm"], episode_stats=options["episode_stats"], history=options["hgpo_history"],
                      alpha=options["hgpo_alpha"], episode_group=options["hgpo_episode_group"])
    _check(got, want)


@settings(max_examples=30, deadline=None)
@given(batch=batches(rewards=st.one_of(ANY_REWARDS, st.sampled_from([0.0, 10.0, -0.1]))), options=GRAPH_OPTIONS,
       similarity=st.sampled_from([None, None, 0.6, 0.9]))
def test_graphgpo_matches_the_loop_spec(batch, options, similarity):
    got = compute_advantages("graphgpo", batch.rows(with_text=similarity is not None), gamma=0.95, lam=0.9,
                             similarity=similarity, **options)
    want = naive_graphgpo(batch.group, batch.traj, batch.step, batch.reward, batch.anchor, gamma=0.95,
                          similarity=similarity, text=batch.text, **options)
    _check(got, want)


# --------------------------------------------------------------------------- options and the command line

def test_options_not_given_and_bad_values_are_named():
    bare = {k: v for k, v in BASE.items() if not k.startswith(("hgpo_", "graph_"))}
    with pytest.raises(AdvantageInputError, match="estimator hgpo needs hgpo_history, hgpo_alpha, hgpo_episode_group"):
        compute_advantages("hgpo", SHARED_STATE, **bare)
    with pytest.raises(AdvantageInputError, match="estimator graphgpo needs graph_gamma"):
        compute_advantages("graphgpo", SHARED_STATE, **bare)
    assert np.any(compute_advantages("gigpo", SHARED_STATE, **bare).advantage != 0)  # GiGPO reads none of them
    for bad, match in [(dict(hgpo_history=-1), "hgpo_history=-1"), (dict(graph_gamma=1.5), "graph_gamma=1.5"),
                       (dict(graph_distance="far"), "graph_distance='far'"), (dict(hgpo_alpha=math.inf), "hgpo_alpha")]:
        with pytest.raises(AdvantageInputError, match=match):
            run("hgpo", SHARED_STATE, **bad)
    with pytest.raises(AdvantageInputError, match="unknown advantage option.*hgpo_histroy"):
        run("hgpo", SHARED_STATE, hgpo_histroy=1)


def test_recipe_keys_are_validated_and_unknown_ones_still_fail():
    from gigpo.config import RecipeError, load_config
    from pathlib import Path

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "sokoban_tiny.yaml"
    config = load_config(recipe, ["algorithm.estimator=hgpo", "algorithm.hgpo_history=4",
                                  "algorithm.hgpo_episode_group=true", "algorithm.graph_distance=delta"])
    assert (config.algorithm.hgpo_history, config.algorithm.hgpo_episode_group) == (4, True)
    for override, named in [("algorithm.hgpo_histroy=1", "hgpo_histroy"), ("algorithm.hgpo_history=-1", "hgpo_history"),
                            ("algorithm.graph_distance=far", "graph_distance")]:
        with pytest.raises(RecipeError, match=named):
            load_config(recipe, [override])


@pytest.mark.parametrize("estimator, flags, options", [
    ("hgpo", ["--hgpo-history", "1", "--hgpo-alpha", "0.5", "--hgpo-episode-group"],
     dict(hgpo_history=1, hgpo_alpha=0.5, hgpo_episode_group=True)),
    ("graphgpo", ["--graph-gamma", "0.3", "--graph-distance", "delta"], dict(graph_gamma=0.3, graph_distance="delta")),
])
def test_cli_computes_the_successors_on_logged_rows(tmp_path, estimator, flags, options):
    source, out = write_jsonl(tmp_path / "steps.jsonl", LOGGED), tmp_path / "adv.jsonl"
    assert main(["advantage", "--estimator", estimator, "--input", str(source), "--output", str(out), *flags]) == 0
    got = read_advantages(out)
    ids = {name: {v: i for i, v in enumerate(dict.fromkeys(r[name] for r in LOGGED))} for name in ("group", "traj")}
    rows = StepRows(group=[ids["group"][r["group"]] for r in LOGGED], traj=[ids["traj"][r["traj"]] for r in LOGGED],
                    step=[r["step"] for r in LOGGED], reward=[r["reward"] for r in LOGGED],
                    anchor=anchor_keys(r["anchor"] for r in LOGGED))
    want = compute_advantages(estimator, rows, **{**dict(BASE, gamma=AlgorithmConfig().gamma), **options})
    np.testing.assert_allclose(got["advantage"], want.advantage, rtol=0, atol=1e-12)
    assert np.any(got["advantage"] != 0.0)


def test_compare_accepts_the_successors_names(tmp_path, capsys):
    # The names are checked in order before any run starts: hgpo and graphgpo pass, the misspelt last one stops it.
    from pathlib import Path

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "maze_long.yaml"
    out = tmp_path / "compare"
    assert main(["compare", str(recipe), "--algos", "gigpo,hgpo,graphgpo,grpo,grpoo", "--seeds", "1",
                 "--out", str(out)]) != 0
    assert "algorithm.estimator='grpoo' is unknown" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("estimator", ["hgpo", "graphgpo"])
def test_rows_of_two_policy_versions_share_no_step_group_when_split(estimator):
    rows = StepRows(group=[0] * 6, traj=[0, 0, 1, 1, 2, 2], step=[0, 1] * 3, reward=[0, 10, 0, 0, 0, 4],
                    anchor=[1, 3, 2, 3, 1, 3], policy_version=[5, 5, 5, 5, 6, 6])
    together = run(estimator, rows)
    split = run(estimator, rows, split_versions=True)
    np.testing.assert_array_equal(together.step_group_size, [2, 3, 1, 3, 2, 3])
    np.testing.assert_array_equal(split.step_group_size, [1, 2, 1, 2, 1, 1])   # traj 2 acted on version 6
    np.testing.assert_array_equal(split.step_advantage[[0, 4, 5]], 0.0)
