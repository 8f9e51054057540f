"""Fixtures of the SDK tests: a real kernelbridge daemon, never a mock.

The daemon binary comes from KB_BINARY (default <repo>/build/kernelbridge).
Each daemon listens on an ephemeral port (--listen 127.0.0.1:0) with a
private state dir under the test's tmp dir and is found, as in
tests/integration/conftest.py, through --port-file (the daemon writes the
bound port there once it listens). Its stdout/stderr go to files; it is
stopped with SIGTERM at the end.

The shared daemon requires a token (so every test also exercises auth) and
sees two extra kernelspecs under a private JUPYTER_PATH: ``kbtest-plain``
(ipykernel under a language with no cwd/env adapter) and ``kbtest-broken``
(a kernel that dies at start, writing to stderr).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

SDK_DIR = Path(__file__).resolve().parents[1]
REPO_DIR = SDK_DIR.parents[1]
sys.path.insert(0, str(SDK_DIR / "src"))  # test the working tree, installed or not

import kernelbridge  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"
PLAIN_LANGUAGE = "kbtestlang"
BROKEN_LANGUAGE = "kbbroken"


def daemon_binary() -> Path:
    return Path(os.environ.get("KB_BINARY") or REPO_DIR / "build" / "kernelbridge")


@dataclass
class Daemon:
    url: str
    token: Optional[str]
    proc: subprocess.Popen
    state_dir: Path
    log_path: Path

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"daemon ignored SIGTERM for {timeout} s; log:\n{self.log()[-4000:]}")
        return self.proc.returncode


def write_test_kernelspecs(root: Path) -> Path:
    """A JUPYTER_PATH dir holding the two test kernelspecs."""
    kernels = root / "kernels"
    plain = kernels / "kbtest-plain"
    plain.mkdir(parents=True)
    (plain / "kernel.json").write_text(json.dumps({
        "argv": [SYSTEM_PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kbtest plain (ipykernel, no adapter)",
        "language": PLAIN_LANGUAGE,
    }))
    broken = kernels / "kbtest-broken"
    broken.mkdir(parents=True)
    (broken / "kernel.json").write_text(json.dumps({
        "argv": [SYSTEM_PYTHON, "-c",
                 "import sys; sys.stderr.write('kbtest-broken: refusing to start\\n'); sys.exit(3)",
                 "{connection_file}"],
        "display_name": "kbtest broken",
        "language": BROKEN_LANGUAGE,
    }))
    return root


def start_daemon(tmp: Path, *args: str, token: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None, ready_timeout: float = 60.0) -> Daemon:
    binary = daemon_binary()
    if not binary.exists():
        pytest.fail(f"daemon binary {binary} not found: build it (cmake -S . -B build && "
                    f"cmake --build build) or set KB_BINARY", pytrace=False)
    tmp.mkdir(parents=True, exist_ok=True)
    state_dir = tmp / "state"
    port_file = tmp / "port"
    argv: List[str] = [str(binary), "serve", "--listen", "127.0.0.1:0", "--state-dir", str(state_dir),
                       "--port-file", str(port_file)]
    if token is not None:
        token_file = tmp / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        argv += ["--token-file", str(token_file)]
    argv += list(args)
    # The daemon reads KB_* itself: keep the caller's (e.g. a KB_TOKEN set
    # for the SDK) out of its environment.
    daemon_env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    daemon_env.update(env or {})
    out_path, log_path = tmp / "daemon.out", tmp / "daemon.log"
    with open(out_path, "wb") as out, open(log_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=daemon_env, cwd=tmp)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            port = int(port_file.read_text().strip())
            return Daemon(f"http://127.0.0.1:{port}", token, proc, state_dir, log_path)
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    pytest.fail(f"daemon did not write its port file (exit {proc.returncode}):\n"
                f"{out_path.read_text(errors='replace')}\n{log_path.read_text(errors='replace')[-4000:]}",
                pytrace=False)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The daemon most tests share (token required, test kernelspecs visible)."""
    tmp = tmp_path_factory.mktemp("daemon")
    jupyter_path = write_test_kernelspecs(tmp / "jupyter")
    d = start_daemon(tmp, token="kbtest-" + uuid.uuid4().hex, env={"JUPYTER_PATH": str(jupyter_path)})
    yield d
    status = d.stop()
    assert status == 0, f"daemon exited {status}; log:\n{d.log()[-4000:]}"


@pytest.fixture
def kb(daemon: Daemon) -> Iterator[kernelbridge.InterpreterService]:
    """A blocking client of the shared daemon."""
    service = kernelbridge.connect(daemon.url, daemon.token)
    yield service
    service.close()


@pytest.fixture
def new_id() -> "callable":
    """Unique context ids, so tests on the shared daemon never collide."""
    return lambda prefix="t": f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def cmake_version() -> str:
    import re

    text = (REPO_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"project\s*\(\s*kernelbridge\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    assert match, "no project(kernelbridge VERSION x.y.z) in CMakeLists.txt"
    return match.group(1)
