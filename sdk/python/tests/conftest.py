"""Fixtures of the SDK tests: real kernelbridge daemons (see kbsdk_testlib).

The shared daemon requires a token (so every test also exercises auth) and
sees three extra kernelspecs under a private JUPYTER_PATH: ``kbtest-plain``
(ipykernel under a language with no cwd/env adapter), ``kbtest-broken``
(a kernel that dies at start, writing to stderr) and ``kbtest-slow``
(ipykernel started 3 s late).
"""

from __future__ import annotations

import re
import uuid
from typing import Callable, Iterator

import pytest

# kbsdk_testlib first: it puts the working tree's src/ on sys.path.
from .kbsdk_testlib import REPO_DIR, Daemon, daemon_binary, start_daemon, write_test_kernelspecs  # isort: skip
import kernelbridge  # isort: skip


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
def new_id() -> Callable[..., str]:
    """Unique context ids, so tests on the shared daemon never collide."""
    return lambda prefix="t": f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def cmake_version() -> str:
    """The version CMake gave the project: a literal in project(), else (the
    version's one place being the SDK's _version.py, which CMakeLists.txt
    reads) the CMAKE_PROJECT_VERSION that configuring the daemon's build dir
    computed."""
    text = (REPO_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"project\s*\(\s*kernelbridge\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    if match:
        return match.group(1)
    assert re.search(r"project\s*\(\s*kernelbridge\s+VERSION\s+\$\{", text), \
        "no project(kernelbridge VERSION ...) in CMakeLists.txt"
    cache = daemon_binary().parent / "CMakeCache.txt"
    assert cache.exists(), f"{cache} not found: the daemon's build dir tells the version CMake computed"
    found = re.search(r"^CMAKE_PROJECT_VERSION:\w+=(\S+)$", cache.read_text(), re.M)
    assert found, f"no CMAKE_PROJECT_VERSION in {cache}"
    return found.group(1)
