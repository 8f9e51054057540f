"""CPU priority of long runs (SPEC section 7, "under load"): a run busy
longer than --hog-after drops below the daemon's and the other kernels'
priority (nice 19 on every thread of its kernel's process tree), and is
restored when the run ends; the daemon itself never runs below its
kernels. Read from /proc: the nice value of every thread (Linux nice is
per thread), with real ipykernel kernels spinning for real."""

import os
import subprocess
import threading
import time

from conftest import BINARY, wait_until
from kernels_testlib import create, kernel_daemon_factory, run  # noqa: F401 (fixture)

# A run that spins in its main thread, in a second thread and in a child
# process for `seconds`; the child's pid is printed first, so that the test
# can find it.
SPIN = """
import subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, '-c',
    'import time\\nt = time.time() + %(s)s\\nwhile time.time() < t: pass'])
print(child.pid, flush=True)
def spin():
    t = time.time() + %(s)s
    while time.time() < t: pass
th = threading.Thread(target=spin); th.start()
spin(); th.join(); child.wait()
"""


def nice_of(tid_dir):
    """The nice value of one thread, from its stat (field 19)."""
    with open(os.path.join(tid_dir, "stat")) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[16])  # fields[0] is field 3 (state)


def thread_nices(pid):
    """{tid: nice} of every thread of pid; {} when it is gone."""
    out = {}
    task = "/proc/%d/task" % pid
    try:
        tids = os.listdir(task)
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            out[int(tid)] = nice_of(os.path.join(task, tid))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def autogroup_nice(pid):
    """The nice of pid's scheduler autogroup (CPU is shared between
    sessions' autogroups first), or None when autogroups are off."""
    try:
        with open("/proc/%d/autogroup" % pid) as f:
            return int(f.read().split("nice")[1])
    except FileNotFoundError:
        return None


def children_of(pid):
    """Direct child pids of pid (from every process's stat)."""
    kids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid == pid:
            kids.append(int(name))
    return kids


def start_run(d, ctx, code):
    """POST /run on a thread; returns (thread, box) where box gets the result."""
    box = {}

    def go():
        box["result"] = d.run(code, context_id=ctx, timeout=60)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, box


def kernel_pid(d, ctx):
    return d.ok("GET", "/contexts/%s" % ctx)["pid"]


def test_a_long_run_drops_below_everyone_and_is_restored(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0", "--hog-after", "0.5")
    create(d, language="python", context_id="hog")
    create(d, language="python", context_id="quiet")
    hog, quiet = kernel_pid(d, "hog"), kernel_pid(d, "quiet")
    daemon_nice = os.getpriority(os.PRIO_PROCESS, d.proc.pid)
    assert set(thread_nices(hog).values()) == {daemon_nice}
    t, box = start_run(d, "hog", SPIN % {"s": 4})
    try:
        # well past the threshold: every thread of the kernel and of its child
        assert wait_until(lambda: children_of(hog), 10)
        assert wait_until(lambda: set(thread_nices(hog).values()) == {19}, 3), thread_nices(hog)
        kids = [k for k in children_of(hog) if "-c" in open("/proc/%d/cmdline" % k).read()]
        assert kids, children_of(hog)
        assert wait_until(lambda: all(set(thread_nices(k).values()) == {19} for k in kids), 3)
        hog_threads = thread_nices(hog)
        assert len(hog_threads) >= 3  # ipykernel's own threads and the run's spinner
        # a kernel leads its own session: its autogroup goes down too
        assert autogroup_nice(hog) in (None, 19), autogroup_nice(hog)
        assert autogroup_nice(quiet) in (None, daemon_nice), autogroup_nice(quiet)
        # the other kernel and every thread of the daemon stay where they were
        assert set(thread_nices(quiet).values()) == {daemon_nice}
        assert set(thread_nices(d.proc.pid).values()) == {daemon_nice}
        prio = d.ok("GET", "/health")["limits"]["priority"]
        assert prio["lowered_now"] == 1 and prio["hog_nice"] == 19, prio
        assert prio["daemon_nice"] == daemon_nice and prio["hog_after_s"] == 0.5, prio
        # a short run on the quiet context is not lowered
        assert run(d, "quiet", "1+1")["results"][0]["text"] == "2"
        assert set(thread_nices(quiet).values()) == {daemon_nice}
    finally:
        t.join(60)
    assert box["result"]["error"] is None, box["result"]
    # the run ended: the kernel is back at the daemon's nice, every thread
    # of it (the run's own thread is gone; ipykernel's stay)
    after = thread_nices(hog)
    assert set(after.values()) == {daemon_nice}, after
    assert set(after) & set(hog_threads)
    assert autogroup_nice(hog) in (None, daemon_nice), autogroup_nice(hog)
    prio = d.ok("GET", "/health")["limits"]["priority"]
    assert prio["lowered_now"] == 0 and prio["lowered_runs"] == 1, prio
    # the next long run is lowered again, and restored again
    r = run(d, "hog", "import time\nt = time.time() + 1.2\nwhile time.time() < t: pass\n'done'")
    assert r["error"] is None, r
    assert set(thread_nices(hog).values()) == {daemon_nice}
    assert d.ok("GET", "/health")["limits"]["priority"]["lowered_runs"] == 2


# A run that spins for 2.5 s, then starts a thread and a process that
# report their own nice values (a kernel's threads are lowered in a few
# passes after the threshold, the later ones inherit it).
LATE = """
import os, subprocess, sys, threading, time
t = time.time() + 2.5
while time.time() < t: pass
seen = {}
def report():
    seen['thread'] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
th = threading.Thread(target=report); th.start(); th.join()
child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'],
                       capture_output=True, text=True)
print(seen['thread'], child.stdout.strip())
"""


def test_threads_and_processes_made_later_in_a_lowered_run_are_low_too(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0", "--hog-after", "0.3")
    create(d, language="python", context_id="c")
    pid = kernel_pid(d, "c")
    r = run(d, "c", LATE, timeout=60)
    assert r["error"] is None, r
    assert "".join(r["logs"]["stdout"]).split() == ["19", "19"], r["logs"]
    assert set(thread_nices(pid).values()) == {0}, thread_nices(pid)


def test_an_interrupted_long_run_is_restored(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0", "--hog-after", "0.3")
    create(d, language="python", context_id="c")
    pid = kernel_pid(d, "c")
    r = run(d, "c", "while True: pass", timeout=1.5)
    assert r["error"] is not None, r  # the timeout interrupted it
    assert set(thread_nices(pid).values()) == {0}, thread_nices(pid)
    assert d.ok("GET", "/health")["limits"]["priority"]["lowered_runs"] == 1


def test_a_lowered_run_is_raised_back_when_it_is_interrupted(kernel_daemon_factory, tmp_path):
    # the kernel answers the interrupt at the daemon's priority: on a busy
    # machine nice 19 could leave it no CPU within the interrupt grace
    d = kernel_daemon_factory("--pool", "python=0", "--hog-after", "0.3")
    create(d, language="python", context_id="c")
    seen = tmp_path / "nice"
    code = ("import os, threading, time\n"
            "try:\n"
            "    t = time.time() + 60\n"
            "    while time.time() < t: pass\n"
            "except KeyboardInterrupt:\n"
            "    with open(%r, 'w') as f:\n"
            "        f.write(str(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))\n"
            "    raise\n" % str(seen))
    r = run(d, "c", code, timeout=1.5)
    assert r["error"] is not None and r["process"]["reason"] == "timed_out", r
    assert wait_until(seen.exists, 10)
    assert int(seen.read_text()) == os.getpriority(os.PRIO_PROCESS, d.proc.pid)
    assert d.ok("GET", "/health")["limits"]["priority"]["lowered_runs"] == 1


def test_hog_after_zero_never_lowers(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0", "--hog-after", "0")
    create(d, language="python", context_id="c")
    pid = kernel_pid(d, "c")
    t, box = start_run(d, "c", "import time\nt = time.time() + 1.5\nwhile time.time() < t: pass")
    try:
        time.sleep(1.0)
        assert set(thread_nices(pid).values()) == {0}
    finally:
        t.join(60)
    assert box["result"]["error"] is None
    prio = d.ok("GET", "/health")["limits"]["priority"]
    assert prio["hog_after_s"] == 0 and prio["lowered_runs"] == 0, prio


def test_a_bad_hog_after_is_refused():
    for value in ("-1", "abc", "100000"):
        p = subprocess.run([BINARY, "serve", "--ephemeral", "--hog-after", value],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode != 0
        assert "--hog-after" in p.stderr, p.stderr
