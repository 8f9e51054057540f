"""A context's `cwd` (SPEC section 3): the kernel's effective working
directory, never null. It is where the kernel's process is now, read from
/proc/<pid>/cwd (so a run's `os.chdir` shows), else where the kernel was
started: the given cwd made absolute, or the daemon's working directory.
Cold and warm (pool) kernels, a daemon restarted on its state dir, and a
kernel attached by connection_info (no pid: the daemon's directory, the
best it knows)."""

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from conftest import Daemon, wait_until
from outside_testlib import start_outside_kernel


def kernel_cwd(d, cid):
    """What os.getcwd() prints inside the context's kernel."""
    result = d.run("import os; print(os.getcwd())", context_id=cid)
    assert result["error"] is None, result
    return result["logs"]["stdout"].strip()


def create(d, **fields):
    return d.ok("POST", "/contexts", dict(language="python", **fields), status=201)


def reported(d, cid):
    return d.ok("GET", "/contexts/%s" % cid)["cwd"]


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix="kbcwd-", dir="/tmp")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cold(workdir):
    d = Daemon(("--pool", "python=0"), workdir=workdir)
    yield d
    d.close()


def test_without_cwd_it_is_the_directory_the_kernel_runs_in(cold, workdir):
    ctx = create(cold)
    assert ctx["cwd"] == str(workdir), ctx  # the daemon's, where the kernel started
    assert os.path.isabs(ctx["cwd"]) and os.path.isdir(ctx["cwd"])
    assert kernel_cwd(cold, ctx["context_id"]) == ctx["cwd"]
    listed = {c["context_id"]: c for c in cold.ok("GET", "/contexts")["contexts"]}
    assert listed[ctx["context_id"]]["cwd"] == str(workdir)


def test_given_cwd_absolute_or_relative(cold, workdir, tmp_path):
    ctx = create(cold, cwd=str(tmp_path))
    assert ctx["cwd"] == str(tmp_path.resolve())
    assert kernel_cwd(cold, ctx["context_id"]) == ctx["cwd"]
    (workdir / "sub").mkdir()
    rel = create(cold, cwd="sub")  # relative to the daemon's directory, as the kernel's chdir
    assert rel["cwd"] == str(workdir / "sub"), rel
    assert kernel_cwd(cold, rel["context_id"]) == rel["cwd"]


def test_it_follows_the_kernel_when_the_code_changes_directory(cold, workdir):
    cid = create(cold)["context_id"]
    assert cold.run("import os; os.chdir('/tmp')", context_id=cid)["error"] is None
    assert reported(cold, cid) == "/tmp"
    # a per-run cwd is restored after the run: the context is back in /tmp
    run = cold.run("import os; print(os.getcwd())", context_id=cid, cwd=str(workdir))
    assert run["logs"]["stdout"] == "%s\n" % workdir, run
    assert reported(cold, cid) == "/tmp"
    # a restart starts the kernel afresh where contexts start
    cold.ok("POST", "/contexts/%s/restart" % cid)
    assert reported(cold, cid) == str(workdir) == kernel_cwd(cold, cid)


def test_default_and_pooled_contexts(workdir, tmp_path):
    d = Daemon(("--pool", "python=1"), workdir=workdir)
    try:
        assert wait_until(lambda: d.ok("GET", "/health")["pool"]["python"]["ready"] == 1, 60)
        pooled = d.ok("GET", "/health")["pool"]["python"]["ready_pids"]
        ctx = create(d)
        assert ctx["pid"] in pooled, "taken from the pool"
        assert ctx["cwd"] == str(workdir) == kernel_cwd(d, ctx["context_id"])
        # a warm kernel given a cwd gets it applied before it is handed over
        assert wait_until(lambda: d.ok("GET", "/health")["pool"]["python"]["ready"] == 1, 60)
        pooled = d.ok("GET", "/health")["pool"]["python"]["ready_pids"]
        there = create(d, cwd=str(tmp_path))
        assert there["pid"] in pooled
        assert there["cwd"] == str(tmp_path.resolve()) == kernel_cwd(d, there["context_id"])
        d.run("1", language="python")
        default = d.ok("GET", "/contexts/default-python")
        assert default["cwd"] == kernel_cwd(d, "default-python")
        # an isolated run's kernel starts where the run asks
        isolated = d.run("import os; print(os.getcwd())", isolated=True, cwd=str(tmp_path))
        assert isolated["logs"]["stdout"] == "%s\n" % tmp_path.resolve(), isolated
    finally:
        d.close()


def test_adopted_after_a_restart_reports_where_the_kernel_is(workdir):
    state = workdir / "state"
    d = Daemon(("--pool", "python=0"), workdir=workdir, state_dir=state)
    try:
        cid = create(d)["context_id"]
        assert d.run("import os; os.chdir('/tmp')", context_id=cid)["error"] is None
    finally:
        d.proc.kill()  # a crash: the kernel lives on and is adopted
        d.proc.wait(timeout=30)
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    d = Daemon(("--pool", "python=0"), workdir=elsewhere, state_dir=state)
    try:
        assert reported(d, cid) == "/tmp" == kernel_cwd(d, cid)
    finally:
        d.close()


def test_attached_kernel_reports_the_daemons_directory(cold, workdir, tmp_path):
    # No pid: the daemon cannot see where that kernel is, and says where
    # it would have started one (documented in docs/concepts/contexts.md).
    info, proc = start_outside_kernel(tmp_path / "outside.json", cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while True:  # the kernel may still be starting up
            r = cold.post("/contexts", {"language": "python", "connection_info": info})
            if r.status == 201 or time.monotonic() > deadline:
                break
        assert r.status == 201, r
        ctx = r.json
        assert ctx["pid"] is None and ctx["cwd"] == str(workdir), ctx
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
