"""Helpers of the template tests: the integration suite's Daemon (one
`kernelbridge serve` over real HTTP), loaded under a name of its own so
that its fixtures are not registered twice."""

import importlib.util
import os
import signal
import time
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "kb_template_integration", Path(__file__).resolve().parent.parent / "integration" / "conftest.py")
_lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lib)
Daemon = _lib.Daemon


def template(d):
    return d.ok("GET", "/health").get("template")


def wait_ready(d, timeout=120, not_pid=None):
    """The template's /health entry once it is ready (with another pid
    than not_pid, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        t = template(d)
        if t and t["state"] == "ready" and t["pid"] and t["pid"] != not_pid:
            return t
        if time.monotonic() > deadline:
            raise AssertionError("the template is not ready: %r" % (t,))
        time.sleep(0.1)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def started_by(nodeid):
    """The pids of the processes started while the test `nodeid` ran
    (pytest names the running test in each process's environment, which
    the daemon, its kernels and every fork inherit), this one excepted."""
    mark = b"PYTEST_CURRENT_TEST=" + nodeid.encode() + b" "
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if any(entry.startswith(mark) for entry in environ.split(b"\0")) and alive(int(name)):
            found.append(int(name))
    return found


@pytest.fixture(autouse=True)
def no_process_left(request):
    """Each test ends with no process of its own left (a fork the template
    made just before it was killed, whose pid nobody learned, once was):
    what is left after a few seconds fails the test, and is killed."""
    yield
    deadline = time.monotonic() + 10
    while (left := started_by(request.node.nodeid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, "processes left by the test: %r" % left
