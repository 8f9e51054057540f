"""A fork of the template that fails after its pid was answered (it dies,
or never answers kernel_info): the context, default context, isolated run
or pool kernel it was for starts the ordinary way, the user sees no error,
and the template is counted failed and made again (SPEC section 13)."""

import os
import shutil
import tempfile
import time
from pathlib import Path

# no_process_left: an autouse fixture, so imported
from .templatelib import Daemon, alive, no_process_left, template, wait_ready  # noqa: F401

# Preloaded into the template (--fork-template python=kbt_fork_fault). Every
# os.fork() runs the hook in the child; the template kernel is depth 0, its
# frozen copy depth 2 (a double fork), a kernel forked from that depth 4.
# While the flag file exists, such a kernel writes its pid down and then
# dies ("die") or never answers ("hang"). The frozen process answers the
# daemon with the pid as soon as the intermediate process has forked it, so
# the daemon has adopted the pid long before the second is over.
FAULT_MODULE = '''
import os, time

FLAG = os.environ.get("KBT_FORK_FAULT", "")
_depth = 0


def _after_fork():
    global _depth
    _depth += 1
    if _depth < 4 or _depth % 2 or not FLAG:
        return
    try:
        with open(FLAG) as f:
            mode = f.read().strip()
    except OSError:
        return
    with open(FLAG + ".pids", "a") as f:
        f.write("%d\\n" % os.getpid())
    time.sleep(1.0 if mode == "die" else 3600)
    os._exit(3)


os.register_at_fork(after_in_child=_after_fork)
'''


class Faulty:
    """A daemon whose template's forks fail while flag says so."""

    def __init__(self, mode, args=(), pool="python=0"):
        self.dir = Path(tempfile.mkdtemp(prefix="kbtpl-fault-"))
        (self.dir / "kbt_fork_fault.py").write_text(FAULT_MODULE)
        self.flag = self.dir / "flag"
        self.flag.write_text(mode)
        path = os.pathsep.join(p for p in (str(self.dir), os.environ.get("PYTHONPATH")) if p)
        self.d = Daemon(["--fork-template", "python=kbt_fork_fault", "--pool", pool, *args],
                        env={"PYTHONPATH": path, "KBT_FORK_FAULT": str(self.flag)})

    def said(self):
        """What the daemon wrote (its warnings go to stdout, requests to stderr)."""
        return self.d.stdout + self.d.log

    def failed_pids(self):
        try:
            return [int(line) for line in (self.dir / "flag.pids").read_text().split()]
        except FileNotFoundError:
            return []

    def close(self):
        try:
            self.d.close()
        finally:
            for pid in self.failed_pids():
                assert not alive(pid), "a failed fork %d is left running" % pid
            shutil.rmtree(self.dir, ignore_errors=True)


def _pool(d):
    return d.ok("GET", "/health")["pool"].get("python") or {"ready": 0}


def _wait_gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def _check_failed_over(f, before, failures):
    """One more fork failed, was the template's failure, and is gone."""
    pids = f.failed_pids()
    assert len(pids) == before + 1, pids
    assert _wait_gone(pids[-1])
    assert "its fork %d did not start" % pids[-1] in f.said(), f.said()
    assert template(f.d)["failures"] == failures + 1
    return pids[-1]


def test_a_fork_that_dies_after_its_pid_starts_the_ordinary_way_for_each_kind_of_kernel():
    f = Faulty("die")
    try:
        d = f.d
        t = wait_ready(d)
        # a context
        ctx = d.ok("POST", "/contexts", {"language": "python", "env": {"KB_T_PROBE": "given"}},
                   status=201)
        died = _check_failed_over(f, 0, 0)
        assert ctx["pid"] != died
        r = d.run("import os; print(6 * 7, os.environ['KB_T_PROBE'])", context_id=ctx["context_id"])
        assert r["error"] is None and r["logs"]["stdout"] == "42 given\n", r
        assert r["execution_count"] == 1
        # an isolated run, once the template is made again
        t = wait_ready(d, not_pid=t["pid"])
        r = d.run("print(2 + 3)", isolated=True)
        assert r["error"] is None and r["logs"]["stdout"] == "5\n", r
        _check_failed_over(f, 1, 1)
        # the default context
        t = wait_ready(d, not_pid=t["pid"])
        r = d.run("x = 5; print(x * 3)")
        assert r["error"] is None and r["logs"]["stdout"] == "15\n", r
        _check_failed_over(f, 2, 2)
        assert d.run("print(x)")["logs"]["stdout"] == "5\n"
        # forks that live again: the template serves
        f.flag.unlink()
        t = wait_ready(d, not_pid=t["pid"])
        assert t["failures"] == 3 and t["why"] is None
        forks = t["forks"]
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        assert d.run("print(1)", context_id=ctx["context_id"])["logs"]["stdout"] == "1\n"
        assert template(d)["forks"] == forks + 1 and len(f.failed_pids()) == 3
    finally:
        f.close()


def test_a_fork_that_never_answers_is_killed_and_the_context_starts_the_ordinary_way():
    f = Faulty("hang", ["--start-timeout", "4"])
    try:
        d = f.d
        wait_ready(d)
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        hung = _check_failed_over(f, 0, 0)  # killed by the daemon, not by itself
        assert ctx["pid"] != hung and "not ready after" in f.said()
        r = d.run("print('fine')", context_id=ctx["context_id"])
        assert r["error"] is None and r["logs"]["stdout"] == "fine\n", r
    finally:
        f.close()


def test_a_pool_kernel_whose_fork_dies_is_dropped_and_refilled():
    f = Faulty("die", pool="python=1")
    try:
        d = f.d
        wait_ready(d)
        # the first pool kernel was launched before the template was ready:
        # taking it makes the pool refill from the template
        deadline = time.monotonic() + 60
        while _pool(d)["ready"] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        deadline = time.monotonic() + 60
        while not f.failed_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        _check_failed_over(f, 0, 0)
        assert "pool python: a kernel failed to start" in f.said()
        while _pool(d)["ready"] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pool(d)["ready"] == 1 and _pool(d)["failures"] == 0
        assert d.run("print(3)", context_id=ctx["context_id"])["logs"]["stdout"] == "3\n"
        again = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        assert d.run("print(4)", context_id=again["context_id"])["logs"]["stdout"] == "4\n"
    finally:
        f.close()
