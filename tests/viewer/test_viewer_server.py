"""`gigpo view` without a browser: opening runs, the HTTP API and its token, the export's size bound, the CLI."""
from __future__ import annotations

import base64
import gzip
import json
import subprocess
import os
from pathlib import Path

import pytest
from viewer_helpers import make_recorder, synthetic_rollout, write_run

from gigpo.viewer.run import NotARunError, open_run
from support.zygote import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    write_run(run)
    recorder = make_recorder(run, rollouts_every=1)
    for iteration in (1, 2):
        steps, episodes, result = synthetic_rollout(n_groups=3, group_size=2, length=4, seed=iteration)
        recorder.after_advantage(iteration, iteration == 2, result, episodes)
    return run


def gigpo_view(*args: str) -> subprocess.CompletedProcess:
    return run_cli(["view", *args], cwd=REPO, env=dict(os.environ), timeout=120)


def test_open_run_indexes_records_and_explains_what_is_missing(run_dir: Path, tmp_path: Path) -> None:
    # a NaN (valid for Python's json, not for the page's JSON.parse) and a line cut by a crash
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 3, "rollout/success": NaN, "rollout/return": 0.5}\n{"iteration": 4, "roll')
    index = open_run(run_dir)
    assert [r["name"] for r in index.records] == ["000001-train", "000002-train"] and not index.notices
    assert [m["iteration"] for m in index.metrics] == [0, 1, 2, 3]
    assert index.metrics[3] == {"iteration": 3, "rollout/return": 0.5}
    json.dumps(index.overview(), allow_nan=False)
    # a record cut short (a crash mid-write of an older version, a full disk) is skipped with a notice
    (run_dir / "records" / "000003-eval.jsonl.gz").write_bytes(b"\x1f\x8b\x08garbage")
    index = open_run(run_dir)
    assert len(index.records) == 2 and "000003-eval.jsonl.gz is unreadable" in index.notices[0]
    old = tmp_path / "old"
    write_run(old)
    assert "has no rollout records" in open_run(old).notices[0]
    with pytest.raises(NotARunError, match="not a gigpo run directory"):
        open_run(tmp_path / "run" / "records")
    with pytest.raises(NotARunError, match="not a directory"):
        open_run(tmp_path / "missing")


def test_api_serves_indexed_records_only_and_needs_the_token(run_dir: Path) -> None:
    from fastapi.testclient import TestClient

    from gigpo.viewer.app import create_app

    client = TestClient(create_app(run_dir, token="s3cret"))
    assert client.get("/api/run").status_code == 401
    assert client.get("/api/run", params={"token": "wrong"}).status_code == 401
    overview = client.get("/api/run", params={"token": "s3cret"}).json()
    assert [r["name"] for r in overview["records"]] == ["000001-train", "000002-train"]
    got = client.get("/api/record/000002-train", headers={"Authorization": "Bearer s3cret"})
    assert got.status_code == 200 and got.headers["content-encoding"] == "gzip"
    stored = gzip.decompress((run_dir / "records" / "000002-train.jsonl.gz").read_bytes()).decode()
    assert got.text == stored  # the client inflates the stored bytes as they are
    for bad in ("000009-train", "..%2Fconfig.yaml", "000001-train.jsonl.gz"):
        assert client.get(f"/api/record/{bad}", params={"token": "s3cret"}).status_code == 404
    page = client.get("/", params={"token": "s3cret"}).text
    assert "/*JS*/" not in page and "function route()" in page and '"mode": "server"' in page


def test_beyond_loopback_needs_a_token() -> None:
    from gigpo.viewer.app import check_exposure

    check_exposure("127.0.0.1", None)
    check_exposure("::1", None)
    check_exposure("0.0.0.0", "t")
    with pytest.raises(ValueError, match="beyond loopback: set --token"):
        check_exposure("0.0.0.0", None)


def test_export_embeds_records_within_its_bound(run_dir: Path, tmp_path: Path) -> None:
    from gigpo.viewer.app import export_html

    full = export_html(run_dir, tmp_path / "all.html", max_bytes=10**8)
    assert full.included == ["000001-train", "000002-train"] and not full.omitted
    html = full.path.read_text()
    bundle = json.loads(html.split('<script id="gigpo-bundle" type="application/json">')[1].split("</script>")[0])
    assert bundle["mode"] == "export"
    assert base64.b64decode(bundle["records"]["000002-train"]) == (run_dir / "records" / "000002-train.jsonl.gz").read_bytes()
    one_record = len(bundle["records"]["000002-train"])
    smaller = export_html(run_dir, tmp_path / "one.html", max_bytes=full.bytes - one_record // 2)
    assert smaller.bytes <= full.bytes - one_record // 2
    assert smaller.included == ["000002-train"] and smaller.omitted == ["000001-train"]  # the newest stays
    assert "leaves out 1 of 2 records" in smaller.path.read_text()


def test_cli_help_and_one_line_errors(run_dir: Path, tmp_path: Path) -> None:
    assert gigpo_view("--help").returncode == 0
    for folder, rc, message in ((tmp_path / "nothing", 2, "is not a directory"),
                                (run_dir / "records", 2, "is not a gigpo run directory")):
        proc = gigpo_view(str(folder), "--export", str(tmp_path / "x.html"))
        assert proc.returncode == rc and message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    old = tmp_path / "old"
    write_run(old)
    proc = gigpo_view(str(old), "--export", str(tmp_path / "old.html"))
    assert proc.returncode == 0 and (tmp_path / "old.html").is_file()
    assert len(proc.stderr.strip().splitlines()) == 1 and "has no rollout records" in proc.stderr
    proc = gigpo_view(str(run_dir), "--host", "0.0.0.0")
    assert proc.returncode == 2 and "beyond loopback" in proc.stderr
