"""gigpo/WebShop-v0: the protocol page by page, invalid actions, the reward, the expert on 500+ goals, the
random baseline, and the same pages in one process or in a pool of one or two workers."""
from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo.envs  # noqa: F401
from gigpo.envs.pool import EnvPool
from gigpo.envs.episode_end import EpisodeOverError
from gigpo.envs.webshop.baselines import evaluate, expert_policy, make_env, random_policy
from gigpo.envs.webshop.env import WebShopEnv
from gigpo.envs.webshop.pages import INSTRUCTION_PREFIX
from gigpo.envs.webshop.reward import best_options

SMALL = 300


def _env(**kwargs) -> WebShopEnv:
    return gym.make("gigpo/WebShop-v0", num_products=kwargs.pop("num_products", SMALL), **kwargs).unwrapped


def _do(env: WebShopEnv, action: str):
    return env.step(f"<action>{action}</action>")


def test_check_env_passes_and_info_has_the_contract_keys():
    env = _env()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)
    observation, info = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    assert info["admissible_actions"] == ["search[<your query>]"] and info["split"] == "train"


def test_pages_follow_webshop_with_the_instruction_on_every_page_and_anchors_without_it():
    env = _env(num_products=1000)  # a long walk through every page (unwrapped: no time limit)
    env.reset(seed=5)
    instruction = env.task
    line, noun = env.goal.keywords.split()[0], env.goal.product_type
    seen = []

    def go(action: str) -> str:
        observation, reward, terminated, truncated, info = _do(env, action)
        assert info["action_valid"], (action, info["invalid_reason"])
        assert observation.split("\n")[0] == INSTRUCTION_PREFIX + instruction
        assert info["anchor"] == observation.split("\n", 1)[1] and instruction not in info["anchor"]
        assert reward == 0.0 and not terminated and not truncated
        seen.append(observation)
        return observation

    page1 = go(f"search[{noun}]")  # a common word: a full top 50
    assert "Page 1 (Total results: 50)" in page1 and env.admissible_actions()[:2] == ["click[back to search]", "click[next >]"]
    results = env.state.results
    assert len(results) == 50 and len(env.state.page_results()) == 10 and all(f"[{a}]" in page1 for a in results[:10])
    page2 = go("click[Next >]")  # buttons are case-insensitive
    assert "Page 2" in page2 and f"[{results[10]}]" in page2 and f"[{results[0]}]" not in page2
    for _ in range(3):
        go("click[next >]")
    assert "click[next >]" not in env.admissible_actions() and "Page 5" in seen[-1]
    assert go("click[< prev]") == seen[3]
    go("click[back to search]")
    go(f"search[{line} {noun}]")
    item = go(f"click[{env.state.results[0]}]")
    product = env.catalogue.by_asin[env.state.results[0]]
    assert product.title in item and f"Price: ${product.price:.2f}" in item
    for name, values in product.options:
        assert all(f"click[{v}]" in env.admissible_actions() for v in values)
    value = product.options[0][1][-1]
    assert f"[{value}] (selected)" in go(f"click[{value}]")
    for sub, expected in (("description", product.description), ("features", product.bullets[0]),
                          ("attributes", ", ".join(product.attributes))):
        assert expected in go(f"click[{sub}]")
        assert env.admissible_actions() == ["click[back to search]", "click[< prev]"]
        assert f"[{value}] (selected)" in go("click[< prev]")  # back on the item, options kept
    assert "/5 " in go("click[reviews]") or "No reviews yet." in seen[-1]
    assert "[Buy Now]" in go("click[< prev]")
    assert "Page 1 (Total results:" in go("click[< prev]")  # the item's < Prev: back to its results page
    assert go("click[back to search]").endswith("to search the shop.")


def test_invalid_and_unclickable_actions_leave_the_page_and_cost_the_penalty():
    env = _env(invalid_action_penalty=0.25)
    observation, _ = env.reset(seed=1)
    for text in ("no tags", "<action>buy it</action>", "<action>click[buy now]</action>", "<action>search[]</action>"):
        after, reward, terminated, truncated, info = env.step(text)
        assert after == observation and reward == -0.25 and not info["action_valid"] and info["invalid_reason"]
    page, reward, _, _, info = _do(env, "search[" + env.goal.keywords + "]")
    assert info["action_valid"] and reward == 0.0
    for action in ("search[again]", "click[not a button]", "click[buy now]", "click[description]"):
        after, reward, _, _, info = _do(env, action)
        assert after == page and reward == -0.25 and not info["action_valid"], action


def test_episodes_are_truncated_after_fifteen_steps_invalid_ones_included_and_then_refuse_steps():
    env = gym.make("gigpo/WebShop-v0", num_products=SMALL)  # the registered default limit: 15
    env.reset(seed=2)
    for step in range(1, 16):
        _, _, terminated, truncated, _ = env.step("nonsense")
        assert not terminated and truncated == (step == 15)
    with pytest.raises(EpisodeOverError, match="truncated after 15 step"):  # no Buy Now (and pay) after the end
        env.step("<action>click[buy now]</action>")
    env.reset(seed=2)
    assert not env.step("nonsense")[3]  # a new episode starts its own count


def test_a_step_after_the_purchase_is_refused_and_non_text_actions_are_invalid():
    env = make_env(15, num_products=SMALL)
    observation, _ = env.reset(seed=3)
    for action in (None, 7, 2.5, b"<action>search[shoes]</action>", ["search[shoes]"]):
        after, reward, terminated, truncated, info = env.step(action)
        assert after == observation and reward == -0.1 and not terminated and not info["action_valid"]
        assert info["invalid_reason"] == f"the action must be text (str), not {type(action).__name__}"
    shop = env.unwrapped
    while not (result := env.step(f"<action>{shop.expert_action()}</action>"))[2]:
        pass
    assert result[1] == 1.0
    with pytest.raises(EpisodeOverError, match="terminated"):
        env.step("<action>click[buy now]</action>")


def test_buy_now_scores_attributes_options_price_and_type():
    env = _env(num_products=1000)
    checked = set()
    for index, goal in enumerate(env.catalogue.goals[:200]):
        line = goal.keywords.split()[0]
        for product in (p for p in env.catalogue.products if line in p.title.lower().split()):
            env.reset(options={"goal_index": index})
            _do(env, f"search[{line}]")
            _do(env, f"click[{product.asin}]")
            for value in best_options(product, goal).values():
                _do(env, f"click[{value}]")
            observation, reward, terminated, _, info = _do(env, "click[buy now]")
            purchase = info["purchase"]
            matched = sum(purchase["attributes"].values()) + sum(purchase["options"].values()) + purchase["price"]
            total = len(goal.attributes) + len(goal.options) + 1
            assert terminated and reward == pytest.approx(matched / total * purchase["type_match"])
            assert info["won"] == (reward == 1.0) == (product.asin == goal.asin)
            assert f"Your score (min 0.0, max 1.0): {reward:.2f}" in observation
            if product.product_type != goal.product_type:
                assert purchase["type_match"] == 0.5
                checked.add("type")
            elif not purchase["price"]:
                assert reward == pytest.approx((total - 1) / total)
                checked.add("price")
            elif not all(purchase["attributes"].values()):
                checked.add("attribute")
            elif not all(purchase["options"].values()):
                checked.add("option")
    assert checked == {"type", "price", "attribute", "option"}  # every kind of look-alike was bought


def test_the_expert_earns_reward_one_on_every_one_of_500_goals():
    env = make_env(15, num_products=1300)
    assert len(env.unwrapped.catalogue.goals) >= 500
    outcomes = evaluate(env, range(len(env.unwrapped.catalogue.goals)), expert_policy)
    assert all(o.won and o.reward == 1.0 for o in outcomes), [o for o in outcomes if not o.won][:3]
    assert max(o.steps for o in outcomes) <= 15


def test_a_random_policy_scores_far_below_the_expert():
    env = make_env(15, num_products=1000)
    outcomes = evaluate(env, list(env.unwrapped.goal_indices)[:100], random_policy(seed=0))
    mean = sum(o.reward for o in outcomes) / len(outcomes)
    assert 0.0 < mean < 0.5 and sum(o.won for o in outcomes) < 20


def test_seeds_pick_goals_of_the_split_only():
    train, test = _env(split="train"), _env(split="test")
    first = train.reset(seed=7)[0]
    assert train.reset(seed=7)[0] == first and train.reset(seed=8)[0] != first
    assert train.reset(seed=7)[1]["goal_index"] == train.goal_indices[7 % len(train.goal_indices)]
    assert {test.reset(seed=s)[1]["goal_index"] for s in range(100)} == set(test.goal_indices)


def _expert_run(workers: int, seeds: list[int]) -> list[tuple]:
    trace = []
    with EnvPool("gigpo/WebShop-v0", env_kwargs={"num_products": SMALL}, max_steps=15, workers=workers) as pool:
        for view in pool.reset(seeds, group_size=2):
            trace.append((view.episode_idx, view.observation, view.anchor, tuple(view.admissible_actions)))
        while pool.live_episodes():
            for view in pool.step({i: f"<action>{a}</action>" for i, a in pool.expert_actions().items()}):
                trace.append((view.episode_idx, view.observation, view.anchor, view.reward, view.won))
        assert all(v.won for v in pool.episodes)
    return trace


def test_the_same_seed_gives_the_same_goal_and_pages_in_one_process_or_a_pool_of_one_or_two_workers():
    seeds = [0, 3, 11]
    one, two = _expert_run(1, seeds), _expert_run(2, seeds)
    assert one == two
    env = _env()
    for g, seed in enumerate(seeds):  # and the same as a direct env in this process
        pages = [env.reset(seed=seed)[0]]
        while env.state.kind != "done":
            pages.append(_do(env, env.expert_action())[0])
        assert pages == [row[1] for row in one if row[0] == 2 * g] == [row[1] for row in one if row[0] == 2 * g + 1]


def test_envs_play_shows_an_expert_episode_page_by_page(capsys):
    from gigpo.cli import main

    assert main(["envs", "play", "gigpo/WebShop-v0", "--seed", "1", "--kwargs", '{"num_products": 300}']) == 0
    out = capsys.readouterr().out
    pages = out.count(INSTRUCTION_PREFIX)
    assert "> search[" in out and "> click[buy now]  reward +1.00" in out and "won after" in out
    assert pages == out.count("\n> ") + 1 >= 4  # the first page, then one per action


def test_the_prompt_shows_the_instruction_once_the_page_and_its_actions():
    from gigpo.envs.prompt import render_prompt

    env = _env()
    observation, info = env.reset(seed=4)
    observation, *_ , info = _do(env, env.expert_action())
    prompt = render_prompt(env.prompt_template, env.task, 2, 15, observation, [], 2, info["admissible_actions"],
                           env.action_format)
    assert prompt.count(env.task) == 1 and "[Next >]" in prompt and "click[next >]" in prompt


def test_warm_up_demonstrations_label_every_page_kind_with_the_expert():
    from gigpo.envs.demos import collect_demonstrations

    with EnvPool("gigpo/WebShop-v0", env_kwargs={"num_products": SMALL}, max_steps=15, workers=1) as pool:
        demos = collect_demonstrations(pool, list(range(20)), explore=0.3, seed=0)
    kinds = {d.action.split("[")[0] for d in demos}
    assert kinds == {"search", "click"} and all(d.response().startswith("<action>") for d in demos)
    assert any(d.action == "click[buy now]" for d in demos)
    assert any("[Description]" in d.view.observation for d in demos)  # item pages are labelled too
