"""Support of the SDK tests: start a real kernelbridge daemon, never a mock.

The daemon binary comes from KB_BINARY (default <repo>/build/kernelbridge).
Each daemon listens on an ephemeral port (--listen 127.0.0.1:0) with a
private state dir under the test's tmp dir and is found, as in
tests/integration/conftest.py, through --port-file (the daemon writes the
bound port there once it listens). Its stdout/stderr go to files; it is
stopped with SIGTERM at the end.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar

import pytest

SDK_DIR = Path(__file__).resolve().parents[1]
REPO_DIR = SDK_DIR.parents[1]
sys.path.insert(0, str(SDK_DIR / "src"))  # test the working tree, installed or not

import kernelbridge  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"
PLAIN_LANGUAGE = "kbtestlang"
BROKEN_LANGUAGE = "kbbroken"
SLOW_LANGUAGE = "kbslowlang"  # ipykernel after 3 s: a start no client outwaits by chance


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
    """A JUPYTER_PATH dir holding the three test kernelspecs."""
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
    slow = kernels / "kbtest-slow"
    slow.mkdir(parents=True)
    (slow / "kernel.json").write_text(json.dumps({
        "argv": [SYSTEM_PYTHON, "-c",
                 "import os, sys, time; time.sleep(3); "
                 "os.execv(sys.executable, [sys.executable, '-m', 'ipykernel_launcher', '-f', "
                 "sys.argv[1]])",
                 "{connection_file}"],
        "display_name": "kbtest slow (ipykernel, 3 s late)",
        "language": SLOW_LANGUAGE,
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


T = TypeVar("T")


def arun(daemon: Any, body: Callable[[kernelbridge.AsyncInterpreterService], Awaitable[T]],
         token: Optional[str] = "<daemon>") -> T:
    """Run ``body(service)`` with a fresh async service on a fresh event loop."""

    async def main() -> T:
        service = await kernelbridge.connect_async(daemon.url, daemon.token if token == "<daemon>" else token)
        try:
            return await body(service)
        finally:
            await service.aclose()

    return asyncio.run(main())


def tiny_png() -> bytes:
    """A valid 1x1 PNG, built here."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


RICH_CODE = """
import base64
from IPython.display import display, HTML, SVG, JSON, Image
display(HTML('<b>bold</b>'))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>'))
display(JSON({'a': 1, 'b': [1, 2]}))
display(Image(data=base64.b64decode('%s'), format='png'))
6 * 7
""" % base64.b64encode(tiny_png()).decode()


def merge_kinds(events: List[Any]) -> List[str]:
    """The kinds of (kind, payload) events, consecutive repeats folded into one."""
    kinds: List[str] = []
    for kind, _ in events:
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
    return kinds


async def running_process_async(service: kernelbridge.AsyncInterpreterService, context_id: str,
                                timeout: float = 30.0) -> kernelbridge.AsyncProcessHandle:
    """The handle of the run now going on in ``context_id`` (polled from the daemon's list)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = await service.processes.list(state="running", context_id=context_id)
        if running:
            return service.process(running[0].process_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no running process on {context_id} within {timeout} s")


def running_process(service: kernelbridge.InterpreterService, context_id: str,
                    timeout: float = 30.0) -> kernelbridge.ProcessHandle:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = service.processes.list(state="running", context_id=context_id)
        if running:
            return service.process(running[0].process_id)
        time.sleep(0.05)
    raise AssertionError(f"no running process on {context_id} within {timeout} s")
