"""Contexts forked from a warm template (--fork-template, SPEC section 13):
fresh to their user, robust when the template dies, refused when a module
does not import, durable across a daemon crash, and many at once."""

import concurrent.futures
import os
import signal
import tempfile
import time

import pytest

# no_process_left: an autouse fixture, so imported
from .templatelib import Daemon, alive, no_process_left, template, wait_ready  # noqa: F401

FRESH = r"""
import os, sys, json as _unused_probe
ip = get_ipython()
print(repr((ip.execution_count, list(In), dict(Out), 'decimal' in sys.modules,
            'decimal' in ip.user_ns, os.getcwd(), os.environ.get('KB_T_PROBE'), os.getpid())))
"""


def test_a_context_from_the_template_is_fresh():
    d = Daemon(["--fork-template", "python=decimal,json", "--pool", "python=0"])
    work = tempfile.mkdtemp(prefix="kbtpl-")
    try:
        t = wait_ready(d)
        assert t["modules"] == ["decimal", "json"] and t["language"] == "python"
        ctx = d.ok("POST", "/contexts", {"language": "python", "cwd": work,
                                          "env": {"KB_T_PROBE": "given"}}, status=201)
        assert ctx["pid"] != t["pid"]
        r = d.run(FRESH, context_id=ctx["context_id"])
        assert r["error"] is None, r
        assert r["execution_count"] == 1
        count, ins, outs, imported, bound, cwd, env, pid = eval(r["logs"]["stdout"])
        assert count == 1 and ins == ["", FRESH.strip()] and outs == {}
        assert imported and not bound  # preloaded: in sys.modules, not in the namespace
        assert os.path.realpath(cwd) == os.path.realpath(work) and env == "given"
        assert pid == ctx["pid"]
        assert d.run("1+1", context_id=ctx["context_id"])["execution_count"] == 2
        after = template(d)
        assert after["forks"] >= 1 and after["pid"] == t["pid"] and alive(t["pid"])
        # rich output and an error with its traceback, as from a started kernel
        r = d.run("1/0", context_id=ctx["context_id"])
        assert r["error"]["name"] == "ZeroDivisionError"
        r = d.run("from IPython.display import HTML; HTML('<b>x</b>')", context_id=ctx["context_id"])
        assert any("text/html" in (x.get("formats") or x) or x.get("html") for x in r["results"]), r
    finally:
        d.close()
        os.rmdir(work)


def test_forks_of_the_template_draw_different_numbers_and_keep_their_own_state():
    d = Daemon(["--fork-template", "python", "--pool", "python=0"])
    try:
        wait_ready(d)
        ids = [d.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
               for _ in range(3)]
        draws = [d.run("import random; print(random.random())", context_id=i)["logs"]["stdout"]
                 for i in ids]
        assert len(set(draws)) == 3
        for n, i in enumerate(ids):
            d.run(f"x = {n}", context_id=i)
        assert [d.run("print(x)", context_id=i)["logs"]["stdout"] for i in ids] == ["0\n", "1\n", "2\n"]
    finally:
        d.close()


def test_a_module_that_does_not_import_stops_the_daemon_with_its_error():
    with pytest.raises(AssertionError) as failed:
        Daemon(["--fork-template", "python=json,kb_no_such_module_here"])
    assert "No module named 'kb_no_such_module_here'" in str(failed.value)
    assert "before listening" in str(failed.value)


def test_bad_entries_are_refused():
    for entry in ("python=json,,x", "=json", "python=os;rm"):
        with pytest.raises(AssertionError) as failed:
            Daemon(["--fork-template", entry])
        assert "--fork-template" in str(failed.value)


def test_a_template_killed_under_load_is_made_again_and_no_create_fails():
    d = Daemon(["--fork-template", "python", "--pool", "python=0", "--max-contexts", "40"])
    try:
        first = wait_ready(d)
        made = []

        def create(n):
            ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
            r = d.run(f"v = {n}; print(v * 2)", context_id=ctx["context_id"])
            return ctx["context_id"], r["logs"]["stdout"]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(create, n) for n in range(12)]
            time.sleep(0.5)
            os.kill(first["pid"], signal.SIGKILL)
            for n, f in enumerate(futures):
                made.append(f.result())
        assert [out for _, out in made] == ["%d\n" % (2 * n) for n in range(12)]
        again = wait_ready(d, not_pid=first["pid"])
        assert again["failures"] >= 1 and not alive(first["pid"])
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        assert d.run("print(1)", context_id=ctx["context_id"])["logs"]["stdout"] == "1\n"
        assert template(d)["forks"] >= 1
    finally:
        d.close()


def test_the_template_is_taken_back_after_a_daemon_crash():
    state = tempfile.mkdtemp(prefix="kbtpl-state-")
    d = Daemon(["--fork-template", "python=json", "--pool", "python=0"], state_dir=state)
    pid = None
    try:
        pid = wait_ready(d)["pid"]
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        d.run("kept = 41", context_id=ctx["context_id"])
        d.kill()
        d2 = Daemon(["--fork-template", "python=json", "--pool", "python=0"], state_dir=state)
        try:
            t = wait_ready(d2)
            assert t["pid"] == pid
            assert d2.run("print(kept + 1)", context_id=ctx["context_id"])["logs"]["stdout"] == "42\n"
            fresh = d2.ok("POST", "/contexts", {"language": "python"}, status=201)
            assert d2.run("print(1)", context_id=fresh["context_id"])["logs"]["stdout"] == "1\n"
            assert template(d2)["forks"] >= 1
        finally:
            d2.close()
        assert not alive(pid)  # a plain stop ends the template
    finally:
        d.kill()
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_hundred_contexts_from_the_template_each_with_its_own_state():
    d = Daemon(["--fork-template", "python", "--pool", "python=0", "--max-contexts", "110"])
    try:
        wait_ready(d)

        def make(n):
            ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
            d.run(f"mine = {n}", context_id=ctx["context_id"])
            return ctx["context_id"]

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            ids = list(pool.map(make, range(100)))
        assert len(set(ids)) == 100
        pids = {d.ok("GET", f"/contexts/{i}")["pid"] for i in ids}
        assert len(pids) == 100
        for n, i in enumerate(ids):
            r = d.run("print(mine, get_ipython().execution_count)", context_id=i)
            assert r["logs"]["stdout"] == f"{n} 2\n"
        assert template(d)["forks"] >= 100
    finally:
        d.close()


def test_kernel_memory_counts_the_contexts_the_pool_and_the_template():
    d = Daemon(["--fork-template", "python", "--pool", "python=1"])
    try:
        t = wait_ready(d)
        deadline = time.monotonic() + 60
        while d.ok("GET", "/health")["pool"]["python"]["ready"] < 1:
            assert time.monotonic() < deadline, "the pool did not fill"
            time.sleep(0.1)
        ids = [d.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
               for _ in range(2)]
        # the pool refills (forked from the template) after each take
        while d.ok("GET", "/health")["pool"]["python"]["ready"] < 1:
            assert time.monotonic() < deadline, "the pool did not refill"
            time.sleep(0.1)
        pool_pids = d.ok("GET", "/health")["pool"]["python"]["ready_pids"]
        memory = d.ok("GET", "/health")["kernel_memory"]
        parts = [memory[k] for k in ("contexts", "pool", "templates")]
        assert [p["kernels"] for p in parts] == [2, len(pool_pids), 1], memory
        for key in ("kernels", "rss_bytes", "pss_bytes"):
            assert memory[key] == sum(p[key] for p in parts), memory
        for p in parts:
            assert 0 < p["pss_bytes"] <= p["rss_bytes"], memory
        # the template's own process is the one counted: its RSS alone is tens of MiB
        with open(f"/proc/{t['pid']}/smaps_rollup") as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("Rss:"))
        assert abs(memory["templates"]["rss_bytes"] - rss) < rss // 4, (memory, rss)
        for i in ids:
            d.ok("DELETE", f"/contexts/{i}", status=204)
    finally:
        d.close()
