"""Helpers of the template tests: the integration suite's Daemon (one
`kernelbridge serve` over real HTTP), loaded under a name of its own so
that its fixtures are not registered twice."""

import importlib.util
import time
from pathlib import Path

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
