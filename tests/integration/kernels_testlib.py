"""Helpers for the per-kernel integration tests (test_kernels_*.py): where the
kernelspecs are, a daemon that finds them, and checks shared by every kernel.

Kernelspecs the tests use, on the daemon's JUPYTER_PATH:
- <repo>/kernelspecs: the project's own small kernels for reliability tests
  (kb-ignore-interrupt, kb-late-sigint, kb-die-on-input, kb-wrong-key,
  kb-never-ready, kb-flood, kb-late-output, kb-no-execute-input,
  kb-port-taken), one kernelspec directory each; Jupyter looks for kernelspecs in
  <entry>/kernels/, so the entry is a private temporary directory whose
  kernels/ links to <repo>/kernelspecs;
- <repo>/.cache/deno/jupyter: Deno's kernelspec, written there by
  scripts/setup.sh (`deno jupyter --install`, from the deno package of npm),
  which also copies it to /usr/local/share/jupyter/kernels/deno for daemons
  started with no JUPYTER_PATH (as docs/getting-started.md starts it);
- the system's: ipykernel (python3), xeus-python (xpython), IRkernel (ir),
  octave_kernel (octave), from Debian packages.
Nothing is installed into the user's Jupyter directories.
"""

import atexit
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, Daemon, error_of, pid_alive, wait_until

KERNELSPECS = REPO / "kernelspecs"
DENO_JUPYTER = REPO / ".cache" / "deno" / "jupyter"
DENO_KERNELSPEC = DENO_JUPYTER / "kernels" / "deno" / "kernel.json"

_LINKED = tempfile.mkdtemp(prefix="kbit-kernelspecs-", dir="/tmp")
os.symlink(KERNELSPECS, os.path.join(_LINKED, "kernels"))
atexit.register(shutil.rmtree, _LINKED, True)
JUPYTER_PATH = "%s:%s" % (_LINKED, DENO_JUPYTER)

# Bounds of the waits in these tests (each well above what the kernel needs
# on a loaded machine; octave_kernel takes about 5 s to start).
RUN_TIMEOUT = 60  # seconds a run may take, as the run's own timeout
DEATH_WAIT = 20.0  # seconds for a killed kernel's run to end


# The test kernels declare language "python" (so that the Python adapter
# serves them), and JUPYTER_PATH comes first in the search: without a map,
# "python" would pick the first of them. Daemons that see them map python to
# ipykernel, as an operator with such kernels installed would.
KERNEL_ARGS = ("--kernel", "python=python3")


def kernel_env(**extra):
    """The environment of a daemon that sees the test kernelspecs."""
    env = {"JUPYTER_PATH": JUPYTER_PATH}
    env.update(extra)
    return env


def require_deno():
    if not DENO_KERNELSPEC.is_file():
        raise AssertionError("%s is missing: run scripts/setup.sh (it installs Deno from npm "
                             "and writes its kernelspec there)" % DENO_KERNELSPEC)


@pytest.fixture(scope="module")
def kernel_daemon():
    """One daemon per test module that sees the test kernelspecs."""
    d = Daemon(KERNEL_ARGS, env=kernel_env())
    yield d
    d.close()


@pytest.fixture
def kernel_daemon_factory(daemon_factory):
    """Start daemons that see the test kernelspecs, with more args / env."""
    def start(*args, env=None):
        return daemon_factory(*KERNEL_ARGS, *args, env=kernel_env(**(env or {})))

    return start


def create(d, status=201, **body):
    """POST /contexts; returns the context."""
    return d.ok("POST", "/contexts", body, status=status)


def run(d, ctx, code, **fields):
    """A run on context ctx with a bounded timeout; returns the result."""
    fields.setdefault("timeout", RUN_TIMEOUT)
    return d.run(code, context_id=ctx, **fields)


def lines(text):
    """Lines of a stream's text, whatever the line ends (kernels on a pty
    end lines with \\r\\n)."""
    return text.splitlines()


def assert_ok(result):
    assert result["error"] is None, result
    assert result["process"]["reason"] == "exited", result
    assert result["process"]["exit_code"] == 0, result


def assert_raised(result):
    assert result["error"] is not None, result
    assert result["process"]["reason"] == "exited", result
    assert result["process"]["exit_code"] == 1, result
    return result["error"]


def texts(result):
    return [r["text"] for r in result["results"]]


def check_timeout_interrupts(d, ctx, long_code, probe_code, probe_text, timeout=3):
    """A run that outlives its timeout is interrupted; the context and its
    state survive: probe_code then gives probe_text as its first result or,
    when it has none, as its stdout."""
    started = time.monotonic()
    result = d.run(long_code, context_id=ctx, timeout=timeout)
    elapsed = time.monotonic() - started
    assert result["process"]["reason"] == "timed_out", result
    assert result["process"]["signal"] == "SIGINT", result
    assert result["process"]["exit_code"] is None, result
    assert result["error"]["name"] == "TimeoutError", result
    assert elapsed < timeout + 10, elapsed
    context = d.ok("GET", "/contexts/%s" % ctx)
    assert context["state"] == "idle", context
    after = run(d, ctx, probe_code)
    assert_ok(after)
    shown = texts(after)[0] if after["results"] else after["logs"]["stdout"].strip()
    assert shown == probe_text, after
    return result


def check_timeout_kernel_dies(d, ctx, long_code, timeout=3):
    """A run that outlives its timeout on a kernel that cannot be interrupted
    (it dies of SIGINT): the run still ends as timed out, and the context
    vanishes with its kernel."""
    pid = d.ok("GET", "/contexts/%s" % ctx)["pid"]
    result = d.run(long_code, context_id=ctx, timeout=timeout)
    assert result["process"]["reason"] == "timed_out", result
    assert result["process"]["exit_code"] is None, result
    assert result["error"]["name"] == "TimeoutError", result
    assert "interrupt" in (result["process"]["raw_reason"] or ""), result
    assert wait_until(lambda: not pid_alive(pid), DEATH_WAIT), pid
    return error_of(d.get("/contexts/%s" % ctx), 404, "SESSION_NOT_FOUND")


def check_kernel_death(d, ctx, long_code):
    """Killing the kernel's process during a run ends the run as failed with
    the signal, and the context vanishes."""
    pid = d.ok("GET", "/contexts/%s" % ctx)["pid"]
    stream = d.run_stream(long_code, context_id=ctx, timeout=RUN_TIMEOUT)
    try:
        events = stream.events()
        first = next(events)
        assert first.event == "start", first
        # The kernel is busy with the run: kill it from outside.
        assert wait_until(lambda: d.ok("GET", "/contexts/%s" % ctx)["state"] == "busy", 10)
        os.kill(pid, signal.SIGKILL)
        last = None
        for event in events:
            last = event
    finally:
        stream.close()
    assert last is not None and last.event == "result", last
    result = last.data
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["signal"] == "SIGKILL", result
    assert result["process"]["exit_code"] is None, result
    assert result["error"]["name"] == "KernelDied", result
    assert wait_until(lambda: not pid_alive(pid), DEATH_WAIT), pid
    body = error_of(d.get("/contexts/%s" % ctx), 404, "SESSION_NOT_FOUND")
    return body


def check_cwd_env(d, ctx, probe_code, tmp_path, parse, refuses_missing_cwd=True):
    """A run's cwd/env apply to that run only (through the language's
    adapter) and are restored afterwards. parse(result) -> (cwd, value of
    KBT_VAR or None)."""
    workdir = tmp_path / "run dir 'quoted' \"too\""
    workdir.mkdir()
    value = "v$1 \"q\" 'x' \\ end"
    before = parse(run(d, ctx, probe_code))
    during = parse(run(d, ctx, probe_code, cwd=str(workdir), env={"KBT_VAR": value}))
    after = parse(run(d, ctx, probe_code))
    assert during == (str(workdir), value), during
    assert before[1] is None, before
    assert after == before, (before, after)
    # A cwd that does not exist fails the run with the kernel's error, the
    # code is not run, and the context is as it was. (A kernel that reports
    # no error for a silent request cannot fail the run: then nothing of the
    # cwd/env is applied.)
    failed = run(d, ctx, probe_code, cwd=str(tmp_path / "missing"), env={"KBT_VAR": "no"})
    if refuses_missing_cwd:
        assert failed["error"] is not None, failed
        assert failed["process"]["exit_code"] == 1, failed
        assert failed["logs"]["stdout"] == "", failed
    else:
        assert parse(failed) == before, failed
    assert parse(run(d, ctx, probe_code)) == before


def wait_for_log(d, text, timeout=10.0):
    return wait_until(lambda: text in d.log, timeout)


__all__ = [
    "DENO_JUPYTER", "DENO_KERNELSPEC", "JUPYTER_PATH", "KERNEL_ARGS", "KERNELSPECS",
    "RUN_TIMEOUT", "Daemon", "kernel_daemon_factory",
    "Path", "assert_ok", "assert_raised", "check_cwd_env", "check_kernel_death",
    "check_timeout_interrupts", "check_timeout_kernel_dies", "create", "error_of", "kernel_daemon", "kernel_env", "lines",
    "pid_alive", "require_deno", "run", "texts", "wait_for_log", "wait_until",
]
