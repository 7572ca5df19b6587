"""`gigpo view` in a real browser (Debian's Chromium, driven by Playwright): a trained run's records as
rendered, the step-group page, and the exported file opened offline; plus a 10k-step record's speed."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gigpo.infra.ports import free_port
from viewer_helpers import make_recorder, synthetic_rollout, write_run
from support.run import REPO, clean_env, gigpo, train

# two iterations of 2 groups x 4 Sokoban episodes of up to 4 steps; a 40-step warm-up (cached across
# runs, ~6 s the first time) so that the model writes actions and its trajectories revisit states
TRAIN = ["env.group_size=4", "env.max_steps=4", "env.eval_episodes=3", "trainer.sft_steps=40", "trainer.sft_rooms=20",
         "trainer.sft_action_share=null", "trainer.sft_batch_size=16", "trainer.sft_lr=3e-3",
         "rollout.max_new_tokens=12", "trainer.iterations=2", "logging.rollouts_every=1"]
WHITE = "rgb(255, 255, 255)"
CELLS_JS = """els => els.map(e => ({traj: +e.dataset.traj, t: +e.dataset.t, sg: +e.dataset.sg, row: +e.parentElement.firstElementChild.textContent,
    bg: getComputedStyle(e).backgroundColor, act: e.querySelector('.act').textContent, invalid: e.classList.contains('invalid'),
    ret: e.querySelector('.v-return').textContent, adv: e.querySelector('.v-adv').textContent,
    adv_step: e.querySelector('.v-adv-step').textContent, adv_episode: e.querySelector('.v-adv-episode').textContent}))"""


def number(text: str) -> float:
    return float(text.replace("−", "-"))


def shown_to_3_decimals(text: str, value: float) -> bool:
    return abs(number(text) - value) <= 5e-4 + 1e-9  # toFixed(3) of a value stored to 6 decimals


def read_record(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
    return lines[0], lines[1:]


def open_hash(page, url: str, expected_hash: str) -> None:
    page.goto(url)
    rendered(page, expected_hash)


def rendered(page, expected_hash: str) -> None:
    page.wait_for_function("h => document.body.dataset.rendered === h", arg=expected_hash, timeout=20_000)
    error = page.locator("main .error")
    assert error.count() == 0, error.inner_text()


def test_trained_run_in_chromium_then_exported_offline(tmp_path: Path, browser) -> None:
    run = tmp_path / "run"
    train(run, *TRAIN)
    record = run / "records" / "000002-train.jsonl.gz"
    # every iteration's update (rollouts_every=1), and each evaluation: the start and the last iteration
    assert {p.name for p in (run / "records").iterdir()} == {
        "000000-eval.jsonl.gz", "000001-train.jsonl.gz", "000002-train.jsonl.gz", "000002-eval.jsonl.gz"}
    header, trajs = read_record(record)
    assert header["groups_kept"] == 2 and header["trajs_kept"] == 8
    # the group whose trajectories share the most states, and its largest step group
    shared = {g: {st["sg"] for tr in trajs if tr["group"] == g for st in tr["steps"] if st["sg_size"] > 1} for g in (0, 1)}
    group = max(shared, key=lambda g: (len(shared[g]), -g))
    assert len(shared[group]) >= 2, shared  # so that distinct anchors can be seen to get distinct colours
    steps = {(tr["traj"], st["t"]): st for tr in trajs if tr["group"] == group for st in tr["steps"]}
    sg = max(shared[group], key=lambda s: (next(st["sg_size"] for st in steps.values() if st["sg"] == s), -s))
    members = sorted((st for st in steps.values() if st["sg"] == sg), key=lambda st: -st["adv_step"])

    port, token = free_port(), "tok-123"
    server = subprocess.Popen([sys.executable, "-m", "gigpo.cli", "view", str(run), "--port", str(port), "--token", token],
                              cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    try:
        base = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(base + "api/run", timeout=2).status_code == 401:  # up, and refusing without the token
                    break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read()
                assert time.time() < deadline, "gigpo view did not start in 60 s"
                time.sleep(0.2)

        # overview: one table row per logged iteration, each linking its records
        open_hash(page, f"{base}?token={token}#/", "#/")
        assert page.eval_on_selector_all("#iterations tbody tr", "rs => rs.map(r => r.dataset.iteration)") == ["0", "1", "2"]
        assert page.locator("svg.curve").count() >= 3
        page.click("#iterations tr[data-iteration='2'] a:text-is('train')")
        rendered(page, "#/r/000002-train")
        assert page.locator("#groups tbody tr").count() == 2
        # the iteration's group table agrees with the record, and its filters select from it
        won = sum(tr["won"] for tr in trajs if tr["group"] == group)
        assert page.inner_text(f"#groups tr[data-group='{group}'] td:nth-child(3)") == f"{won}/4"
        page.select_option("#filters select[name=outcome]", "none")
        rendered(page, "#/r/000002-train?outcome=none&sort=group")
        lost = [g for g in (0, 1) if not any(tr["won"] for tr in trajs if tr["group"] == g)]
        assert page.eval_on_selector_all("#groups tbody tr", "rs => rs.map(r => +r.dataset.group)") == lost
        page.check("#filters input[name=invalid]")
        rendered(page, "#/r/000002-train?outcome=none&invalid=1&sort=group")
        assert page.eval_on_selector_all("#groups tbody tr", "rs => rs.map(r => +r.dataset.group)") == [
            g for g in lost if any(tr["invalid_steps"] for tr in trajs if tr["group"] == g)]
        page.goto(f"{base}?token={token}#/r/000002-train")
        rendered(page, "#/r/000002-train")
        page.click(f"#groups tr[data-group='{group}'] a")
        rendered(page, f"#/r/000002-train/g/{group}")

        cells = page.eval_on_selector_all("#steps td.cell", CELLS_JS)
        assert {(c["traj"], c["t"]) for c in cells} == set(steps)
        for c in cells:
            st = steps[(c["traj"], c["t"])]
            assert c["row"] == c["t"]  # aligned by step: each row holds the trajectories' step t
            assert c["act"] == (st["action"] if st["valid"] else "invalid") and c["invalid"] == (not st["valid"])
            for key, field in (("ret", "return"), ("adv", "adv"), ("adv_step", "adv_step"), ("adv_episode", "adv_episode")):
                assert shown_to_3_decimals(c[key], st[field]), (c, st)
        colour = {}
        for c in cells:  # one colour per step group, the same in every cell of it
            assert colour.setdefault(c["sg"], c["bg"]) == c["bg"]
        shared_colours = [colour[s] for s in shared[group]]
        assert len(set(shared_colours)) == len(shared_colours) and WHITE not in shared_colours
        assert all(colour[c["sg"]] == WHITE for c in cells if steps[(c["traj"], c["t"])]["sg_size"] == 1)
        page.screenshot(path=str(tmp_path / "group.png"), full_page=True)

        # a step group: every action from one state, sorted by step advantage (the paper's Figure 3)
        page.click(f"#steps td.cell[data-sg='{sg}'] a >> nth=0")
        rendered(page, f"#/r/000002-train/g/{group}/s/{sg}")
        assert page.inner_text("#anchor-state") == members[0]["obs"]
        rows = page.eval_on_selector_all("#members tbody tr", """rs => rs.map(r => ({traj: +r.dataset.traj, t: +r.dataset.t,
            step: r.querySelector('.v-adv-step').textContent, act: r.querySelector('.act').textContent}))""")
        assert len(rows) == len(members) == members[0]["sg_size"]
        shown = [number(r["step"]) for r in rows]
        assert shown == sorted(shown, reverse=True)
        for r in rows:
            st = steps[(r["traj"], r["t"])]
            assert st["sg"] == sg and shown_to_3_decimals(r["step"], st["adv_step"])
            assert r["act"] == (st["action"] if st["valid"] else "invalid")
        page.screenshot(path=str(tmp_path / "step_group.png"), full_page=True)
        assert not problems, problems
    finally:
        page.close()
        server.terminate()
        server.wait(timeout=30)

    # the export: one file that renders with the network off and fetches nothing
    out = tmp_path / "run.html"
    gigpo("view", str(run), "--export", str(out))
    context = browser.new_context(offline=True)
    fetched: list[str] = []

    def only_the_file(route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            fetched.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_file)
    offline = context.new_page()
    offline.on("pageerror", lambda exc: problems.append(str(exc)))
    open_hash(offline, f"{out.as_uri()}#/r/000002-train/g/{group}/s/{sg}", f"#/r/000002-train/g/{group}/s/{sg}")
    assert offline.locator("#members tbody tr").count() == len(members)
    seed = read_record(run / "records" / "000000-eval.jsonl.gz")[0]["seeds"][0]  # evaluation seeds are fixed
    open_hash(offline, f"{out.as_uri()}#/diff?phase=eval&seed={seed}", f"#/diff?phase=eval&seed={seed}")
    assert offline.locator("#steps td.cell").count() >= 2  # the seed's episode at iteration 0 beside iteration 2's
    offline.screenshot(path=str(tmp_path / "export_offline.png"), full_page=True)
    context.close()
    assert not fetched and not problems, (fetched, problems)


def test_a_10k_step_record_stays_responsive(tmp_path: Path, browser) -> None:
    run = tmp_path / "big"
    write_run(run, iterations=1)
    steps, episodes, result = synthetic_rollout(n_groups=300, group_size=8, length=8, seed=5, states=6)
    assert len(steps) >= 10_000
    make_recorder(run, rollouts_every=1).after_advantage(1, True, result, episodes)
    out = tmp_path / "big.html"
    gigpo("view", str(run), "--export", str(out))
    _, trajs = read_record(run / "records" / "000001-train.jsonl.gz")
    sg = next(st["sg"] for tr in trajs if tr["group"] == 17 for st in tr["steps"] if st["sg_size"] > 1)
    page = browser.new_page()
    timings = {}
    for name, route in (("iteration", "#/r/000001-train"), ("filtered", "#/r/000001-train?outcome=mixed&sort=size"),
                        ("group", "#/r/000001-train/g/17"), ("step group", f"#/r/000001-train/g/17/s/{sg}"),
                        ("iteration again", "#/r/000001-train?page=6")):
        start = time.perf_counter()
        open_hash(page, f"{out.as_uri()}{route}", route) if name == "iteration" else (
            page.evaluate(f"location.hash = {json.dumps(route)}"), rendered(page, route))
        timings[name] = time.perf_counter() - start
    print(f"10k-step record ({len(steps)} steps, export {out.stat().st_size / 1e6:.1f} MB): "
          + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in timings.items()))
    assert page.locator("#groups tbody tr").count() == 50  # one page of groups, not 300
    # generous for 2 busy cores; the first view includes decoding and indexing the whole record
    assert timings["iteration"] < 10 and max(v for k, v in timings.items() if k != "iteration") < 3, timings
    page.close()
