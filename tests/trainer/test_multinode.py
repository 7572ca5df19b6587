"""Two "hosts" on one machine: network namespaces joined by a veth pair, addresses only inside them.

What runs is the launch users take beyond one machine (docs/trainer.md, "Several machines"): on each
host the DeepSpeed launcher with `--no_ssh --node_rank K`, ranks talking over gloo between the hosts; a
`gigpo serve` generation server on host A that the trainer on host B reaches with a token, weights sent
by broadcast (rollout.weight_sync=nccl: gloo here); the env pool on B. Then: 4 iterations planned with a
checkpoint each; a SIGKILLed rank on host A once iteration 2 is done, after which host B must stop with a
clear error, not hang; a resume from the last complete checkpoint that finishes the run. The commands and their output go to MULTINODE_LOG when set (the committed
docs/results/multinode.log). Needs root (CAP_NET_ADMIN) and iproute2; skips with the reason otherwise.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from support.run import REPO, SMALL, clean_env, metrics_of, metrics_so_far

SUBNET = "10.77.{}.{}"
TOKEN = "multinode-test-token"
LOG: list[str] = []
LAUNCHED: list[subprocess.Popen] = []
HEALTH_POLL = """import sys, time, urllib.request
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
"""
"""Exits 0 as soon as the URL answers 200, 1 when it has not within argv[2] seconds (run inside a namespace)."""
PLANNED = 4  # iterations: the kill comes after 2; one more than the original 3 leaves room on a fast machine


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def _namespaces_unavailable() -> str:
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    probe = f"gigpo-probe-{os.getpid()}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"cannot create network namespaces here (needs CAP_NET_ADMIN): {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return ""


pytestmark = pytest.mark.skipif(bool(_namespaces_unavailable()), reason=_namespaces_unavailable() or "-")


def log(line: str) -> None:
    LOG.append(line)
    print(line, flush=True)


class Host:
    """A network namespace with one end of the veth pair, addressed `address`."""

    def __init__(self, name: str, ifname: str, address: str) -> None:
        self.name, self.ifname, self.address = name, ifname, address

    def prefix(self, **env: str) -> list[str]:
        # GLOO_SOCKET_IFNAME: gloo otherwise binds to the address the host name resolves to, which is not
        # inside the namespace (the same holds on real machines with several interfaces).
        env = {"GLOO_SOCKET_IFNAME": self.ifname, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1", "GIGPO_SERVER_TOKEN": TOKEN,
               "TOKENIZERS_PARALLELISM": "false", **env}
        return ["ip", "netns", "exec", self.name, "env", *[f"{k}={v}" for k, v in env.items()]]


@pytest.fixture(scope="module")
def hosts():
    tag = uuid.uuid4().hex[:6]
    net = 100 + os.getpid() % 150
    a = Host(f"gigpo-a-{tag}", f"va{tag}", SUBNET.format(net, 1))
    b = Host(f"gigpo-b-{tag}", f"vb{tag}", SUBNET.format(net, 2))
    commands = [("netns", "add", a.name), ("netns", "add", b.name),
                ("link", "add", a.ifname, "type", "veth", "peer", "name", b.ifname),
                ("link", "set", a.ifname, "netns", a.name), ("link", "set", b.ifname, "netns", b.name)]
    for h in (a, b):
        commands += [("-n", h.name, "addr", "add", f"{h.address}/24", "dev", h.ifname),
                     ("-n", h.name, "link", "set", h.ifname, "up"), ("-n", h.name, "link", "set", "lo", "up")]
    try:
        for c in commands:
            log("$ ip " + " ".join(c))
            done = _ip(*c)
            assert done.returncode == 0, f"ip {' '.join(c)}: {done.stderr}"
        yield a, b
    finally:
        for h in (a, b):
            _ip("netns", "del", h.name)


@pytest.fixture(scope="module")
def server(hosts, tiny_model_dir, tmp_path_factory):
    a, _ = hosts
    port = 8100
    cmd = a.prefix() + [sys.executable, "-m", "gigpo.cli", "serve", "--model", str(tiny_model_dir), "--host", a.address,
                        "--port", str(port), "--token", TOKEN, "--dtype", "fp32", "--max-num-seqs", "32",
                        "--enforce-eager"]
    log("# host A: the generation server, bound to A's address only, weight routes behind the token")
    log("$ " + shlex.join(cmd))
    out = tmp_path_factory.mktemp("serve") / "serve.log"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=out.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=clean_env())
    url = f"http://{a.address}:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            # one poller inside A's namespace asks every 0.2 s for 10 s: a process (and its imports) per answer
            # every 2 s cost CPU the server's start needed, and up to 2 s after it was up
            ok = subprocess.run(a.prefix() + [sys.executable, "-c", HEALTH_POLL, f"{url}/health", "10"], capture_output=True)
            if ok.returncode == 0:
                break
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a server still serving a failed test's trainers: do not leave it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def launch(host: Host, node_rank: int, master: Host, hostfile: Path, run_dir: Path, url: str, port: int,
           *extra: str, resume: bool = False) -> tuple[subprocess.Popen, Path]:
    """One host's share of the run: the DeepSpeed launcher, without ssh, starting that host's rank."""
    overrides = [*SMALL, f"trainer.run_dir={run_dir}", f"model.path={os.environ['GIGPO_TEST_MODEL']}",
                 "trainer.nprocs=2", "trainer.zero_stage=2", "trainer.save_every=1", "trainer.eval_every=100",
                 "rollout.backend=vllm-server", f"rollout.server_urls=[{url}]", "rollout.weight_sync=nccl", *extra]
    cmd = host.prefix() + [sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(hostfile),
                           "--no_ssh", "--node_rank", str(node_rank), "--master_addr", master.address,
                           "--master_port", str(port), "--num_gpus", "1", "--no_local_rank",
                           "--module", "gigpo.cli", "train", "recipes/sokoban_tiny.yaml", *overrides]
    if resume:
        cmd.append("--resume")
    log("$ " + shlex.join(cmd))
    out = run_dir.parent / f"{run_dir.name}-node{node_rank}-{time.monotonic_ns()}.log"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=out.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=clean_env())
    LAUNCHED.append(proc)
    return proc, out


@pytest.fixture(autouse=True)
def no_launch_outlives_the_test():
    """A failed assertion must not leave ranks training against the server (its teardown would then hang)."""
    yield
    for proc in LAUNCHED:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    LAUNCHED.clear()


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, signal.SIGKILL)
            raise
    return [p.returncode for p in procs]


def tail(path: Path, lines: int = 12) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_two_hosts_train_checkpoint_survive_a_killed_rank_and_resume(hosts, server, tiny_model_dir, tmp_path):
    a, b = hosts
    os.environ["GIGPO_TEST_MODEL"] = str(tiny_model_dir)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("host-b slots=1\nhost-a slots=1\n")  # node 0 = B (rank 0: envs, generation client)
    log(f"# hostfile (names are labels: with --no_ssh nothing is resolved or dialled by name)\n{hostfile.read_text()}")
    run_dir = tmp_path / "run"

    log(f"# 1) rank 0 on host B, rank 1 on host A, {PLANNED} iterations planned, a checkpoint after each; SIGKILL host "
        "A's rank as soon as iteration 2's metrics line is written (checkpoint 2 complete, iteration 3 begun)")
    start = time.monotonic()
    planned = f"trainer.iterations={PLANNED}"
    procs = [launch(b, 0, b, hostfile, run_dir, server, 29611, planned),
             launch(a, 1, b, hostfile, run_dir, server, 29611, planned)]
    deadline = time.monotonic() + 400
    rank1 = None  # found before iteration 2 ends: a tiny iteration can take less time than a process search
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p, _ in procs), "\n".join(tail(o, 40) for _, o in procs)
        if rank1 is None:
            pids = subprocess.run(["pgrep", "-f", "gigpo.cli train"], capture_output=True, text=True).stdout.split()
            rank1 = _rank_process(pids, a.name)
        if rank1 is not None and any(r["iteration"] >= 2 for r in metrics_so_far(run_dir)):
            break
        time.sleep(0.02)
    assert rank1 is not None and time.monotonic() < deadline, "iteration 2 never finished"
    os.kill(rank1, signal.SIGKILL)
    killed_at = time.monotonic()
    log(f"# SIGKILL rank 1 (pid {rank1}) on host A, {killed_at - start:.0f} s after the launch")
    codes = wait_all([p for p, _ in procs], timeout=120)
    stopped_in = time.monotonic() - killed_at
    for (_, out), code in zip(procs, codes):
        said = [line for line in out.read_text(errors="replace").splitlines() if line.startswith("gigpo:")]
        log(f"[exit {code}] {out.name}:\n" + "\n".join([*said, tail(out, 2)]))
    log(f"# both hosts stopped {stopped_in:.1f} s after the kill")
    assert all(c != 0 for c in codes)
    b_out = procs[0][1].read_text(errors="replace")
    assert f"gigpo: rank 0 lost the connection to another rank at {a.address}" in b_out, b_out[-3000:]
    assert "--resume" in b_out
    assert stopped_in < 60
    # The kill lands somewhere after iteration 2's line: usually in iteration 3, on a fast idle machine maybe later.
    rows = [r for r in metrics_of(run_dir) if "time/iteration" in r]  # training rows (iteration 0: the first eval)
    last = rows[-1]["iteration"]
    assert [r["iteration"] for r in rows] == list(range(1, last + 1)) and last >= 2
    assert all(r["rollout/env_steps_total"] > 0 for r in rows)
    checkpoints = sorted((int(p.name) for p in (run_dir / "checkpoints").iterdir() if (p / "meta.json").is_file()))
    # a checkpoint is complete before its iteration's metrics line: the kill may fall between the two
    assert checkpoints in (list(range(1, last + 1)), list(range(1, last + 2))), (checkpoints, last)
    assert checkpoints[-1] < PLANNED, f"the kill came after the run's last checkpoint ({checkpoints}): nothing to resume"
    version = _server_version(b, server)  # asked from host B, as the trainer does
    assert version >= last, f"the server on host A holds weight version {version}, not iteration {last}'s"
    log(f"# complete checkpoints {checkpoints}; the server on host A holds weight version {version} "
        "(synced by broadcast after each iteration)")

    before_resume = len(metrics_of(run_dir))
    log(f"# 2) resume from the last complete checkpoint ({checkpoints[-1]}) on both hosts")
    start = time.monotonic()
    procs = [launch(b, 0, b, hostfile, run_dir, server, 29612, planned, resume=True),
             launch(a, 1, b, hostfile, run_dir, server, 29612, planned, resume=True)]
    codes = wait_all([p for p, _ in procs], timeout=400)
    for (_, out), code in zip(procs, codes):
        log(f"[exit {code}] {out.name}:\n{tail(out)}")
    assert codes == [0, 0], "\n".join(tail(o, 60) for _, o in procs)
    rows = metrics_of(run_dir)
    resumed = [r["iteration"] for r in rows[before_resume:] if "time/iteration" in r]
    assert resumed == list(range(checkpoints[-1] + 1, PLANNED + 1)), resumed  # continued, not restarted
    assert rows[-1]["iteration"] == PLANNED and (run_dir / "checkpoints" / str(PLANNED) / "meta.json").is_file()
    assert _server_version(b, server) == PLANNED
    log(f"# resumed from checkpoint {checkpoints[-1]}, finished iteration {PLANNED} in {time.monotonic() - start:.0f} s; "
        f"the server holds version {PLANNED}; metrics iterations: {[r['iteration'] for r in rows]}")
    if os.environ.get("MULTINODE_LOG"):
        Path(os.environ["MULTINODE_LOG"]).write_text("\n".join(LOG) + "\n")


def _server_version(host: Host, url: str) -> int:
    out = subprocess.run(host.prefix() + [sys.executable, "-c", f"import requests; print(requests.get('{url}/version', "
                                          "timeout=5).json()['version'])"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip())


def _rank_process(pids: list[str], namespace: str) -> int | None:
    """The `gigpo.cli train` rank process living in `namespace` (not its launcher)."""
    for pid in pids:
        try:
            ns = subprocess.run(["ip", "netns", "identify", pid], capture_output=True, text=True).stdout.strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ns == namespace and b"deepspeed.launcher.runner" not in cmdline and b"deepspeed.launcher.launch" not in cmdline \
                and cmdline[:1] != [b"ip"]:
            return int(pid)
    return None
