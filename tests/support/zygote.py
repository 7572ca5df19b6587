"""`gigpo` commands for tests, forked from a process that has already imported torch, transformers and DeepSpeed.

Why: a `gigpo train` subprocess spends about 5 s (10 under `make test`'s load) importing before it does anything,
and the suite starts well over a hundred of them. A fork of a preloaded interpreter starts in milliseconds and is
still a process of its own: its own pid, exit code, signals, output, process group, children and crash.

How: one server per pytest process (`python tests/support/zygote.py`, started on first use) imports the heavy
modules, then reads one request at a time (argv, cwd, environment, output files) from its stdin, forks, and in the
child runs `python -m gigpo.cli ARGS` as the interpreter would (gigpo.cli as __main__, sys.path[0] = cwd, atexit
handlers, exit code); it answers with the child's pid, then with its exit status.

What a fork cannot reproduce falls back to a real subprocess (`run_cli` decides): an environment that differs from
the server's in a variable read at import time (PYTHONPATH, thread counts, accelerator, Hugging Face paths), or
GIGPO_TEST_ZYGOTE=0. Tests about process isolation (signals to a process group, orphans found by their environment
block, which a fork does not rewrite) start their processes themselves.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
PRELOAD = ("torch", "numpy", "transformers", "deepspeed", "safetensors.torch", "gigpo.cli", "gigpo.trainer.cli",
           "gigpo.trainer.loop", "gigpo.trainer.setup", "gigpo.trainer.engines", "gigpo.rollout.hf_backend",
           "gigpo.envs", "gigpo.experiments.compare", "matplotlib.pyplot")
"""What every `gigpo train` imports (vLLM is left out: its engine starts a fresh process anyway, and its settings
are environment variables read throughout)."""
IMPORT_TIME_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "HF_", "TRANSFORMERS_", "DS_", "CUDA_",
                        "TORCH_", "LD_", "MPLBACKEND", "MPLCONFIGDIR", "DEEPSPEED_", "ACCELERATE_", "NUMEXPR_")
"""Variables a module may read when imported: a request whose value differs from the server's runs in a real
subprocess, since the preloaded modules have already read theirs."""


def import_time_environment(env: dict[str, str]) -> dict[str, str]:
    """The variables that must equal the server's; PYTHONPATH may only add folders in front of the server's (the
    child puts them on sys.path as a fresh interpreter would: a user's environment module, a test's helpers)."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k != "PYTHONPATH"}


def added_python_path(env: dict[str, str], server_env: dict[str, str]) -> Optional[list[str]]:
    """The folders `env`'s PYTHONPATH puts before the server's, or None when it is not such an extension."""
    ours = [p for p in server_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    theirs = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if theirs[len(theirs) - len(ours):] != ours:
        return None
    return theirs[:len(theirs) - len(ours)]


# ---------------------------------------------------------------- client side (the pytest process)

class _Server:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        # unbuffered: select() on the pipe must see every reply line that has not been read yet
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], cwd=REPO, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     bufsize=0)
        ready = self._reply(timeout=300)
        if ready.get("ready") is not True:
            raise RuntimeError(f"the test zygote did not start: {ready}")

    def _reply(self, timeout: float) -> dict:
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            raise ConnectionError(f"the test zygote exited with {self.proc.wait()}")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """The child writes into two FIFOs read here until every process holding them has closed them, as
        subprocess.run's pipes are: what the command started and left running still holds the test up (a
        multiprocessing resource tracker ends a moment after the command; a file would not wait for it)."""
        command = [sys.executable, "-m", "gigpo.cli", *args]
        with tempfile.TemporaryDirectory(prefix="zygote-") as tmp:
            paths = [Path(tmp, "stdout"), Path(tmp, "stderr")]
            for path in paths:
                os.mkfifo(path)
            readers = [os.open(path, os.O_RDONLY | os.O_NONBLOCK) for path in paths]
            try:
                request = dict(args=args, cwd=str(cwd), env=env, stdout=str(paths[0]), stderr=str(paths[1]),
                               python_path=added_python_path(env, self.env))
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                pid = self._reply(timeout=60)["pid"]  # sent once the child holds the FIFOs' write ends
                returncode, out, err = self._collect(pid, readers, timeout, command)
            finally:
                for fd in readers:
                    os.close(fd)
        return subprocess.CompletedProcess(command, returncode, out, err)

    def _collect(self, pid: int, readers: list[int], timeout: float, command: list[str]) -> tuple[int, str, str]:
        chunks: dict[int, list[bytes]] = {fd: [] for fd in readers}
        open_fds, returncode = set(readers), None
        deadline = time.monotonic() + timeout
        while open_fds or returncode is None:
            waiting = list(open_fds) + ([self.proc.stdout] if returncode is None else [])
            ready = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                os.kill(pid, signal.SIGKILL)
                if returncode is None:
                    self._reply(timeout=60)
                text = [b"".join(chunks[fd]).decode(errors="replace") for fd in readers]
                raise subprocess.TimeoutExpired(command, timeout, output=text[0], stderr=text[1])
            for fd in ready:
                if fd is self.proc.stdout:
                    returncode = self._reply(timeout=60)["returncode"]
                    continue
                data = os.read(fd, 1 << 16)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.discard(fd)
        out, err = (b"".join(chunks[fd]).decode(errors="replace") for fd in readers)
        return returncode, out, err

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_server: Optional[_Server] = None
_lock = threading.Lock()
_BASE_ENV = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE",
                                                               "MASTER_ADDR", "MASTER_PORT")}
"""The server's environment: this process's as the test session began, before any test set a marker variable in it
(a marker in the server's own environment block would make it one of the processes a test looks for)."""


def server_pid() -> Optional[int]:
    """The running server's pid (tests that look for leftover processes leave it out: it outlives every test)."""
    return _server.proc.pid if _server is not None and _server.alive() else None


def run_cli(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """`python -m gigpo.cli ARGS` in `cwd` with environment `env`, like subprocess.run(capture_output=True, text=True)
    (TimeoutExpired after `timeout` s, the process killed), forked from the preloaded server where it can be."""
    global _server
    if os.environ.get("GIGPO_TEST_ZYGOTE", "1") == "0":
        return _subprocess(args, cwd, env, timeout)
    with _lock:
        if _server is None or not _server.alive():
            _server = _Server(_BASE_ENV)
            atexit.register(_server.close)
        if (import_time_environment(env) != import_time_environment(_server.env)
                or added_python_path(env, _server.env) is None):
            return _subprocess(args, cwd, env, timeout)
        return _server.run(args, cwd, env, timeout)


def _subprocess(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gigpo.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- server side

def _child(request: dict, outputs: tuple[int, int], protocol_fds: tuple[int, int]) -> None:
    """In the forked child: become `python -m gigpo.cli ARGS` and never return."""
    import gigpo.cli

    code = 1
    try:
        for fd in protocol_fds:
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, target in zip((1, 2), outputs):
            os.dup2(target, fd)
            os.close(target)
        sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first, then PYTHONPATH's folders
        sys.path[1:1] = request["python_path"]
        sys.argv = [gigpo.cli.__file__, *request["args"]]
        # `python -m gigpo.cli` makes the module __main__: a spawned child (the env pool's workers) then imports it
        # by that name before unpickling what it was sent.
        sys.modules["__main__"] = gigpo.cli
        try:
            code = gigpo.cli.main()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, (int, type(None))):
                print(stop.code, file=sys.stderr)
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 130
        except BaseException:  # the interpreter's own behaviour: print the traceback, exit 1
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve() -> None:
    protocol_in = os.fdopen(os.dup(0), "r")
    protocol_out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    sys.path[0] = str(REPO)
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    protocol_out.write(json.dumps({"ready": True}) + "\n")
    protocol_out.flush()
    for line in protocol_in:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        # the client holds the FIFOs' read ends open, so these opens do not block
        outputs = (os.open(request["stdout"], os.O_WRONLY), os.open(request["stderr"], os.O_WRONLY))
        pid = os.fork()
        if pid == 0:
            _child(request, outputs, (protocol_in.fileno(), protocol_out.fileno()))
        for fd in outputs:
            os.close(fd)
        protocol_out.write(json.dumps({"pid": pid}) + "\n")
        protocol_out.flush()
        _, status = os.waitpid(pid, 0)
        protocol_out.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        protocol_out.flush()


if __name__ == "__main__":
    serve()
