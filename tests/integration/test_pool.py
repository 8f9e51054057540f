"""The warm pool through the daemon: --pool, /health, contexts and isolated
runs that take ready kernels, refills, and the max-contexts budget."""

import os
import signal

from conftest import error_of, pid_alive, wait_until


def pool_entry(d, key="python"):
    return d.ok("GET", "/health")["pool"][key]


def wait_ready(d, count, key="python", timeout=60):
    assert wait_until(lambda: pool_entry(d, key)["ready"] == count, timeout), pool_entry(d, key)


def test_default_pool_is_one_python_kernel(daemon):
    wait_ready(daemon, 1)
    entry = pool_entry(daemon)
    assert entry["target"] == 1 and entry["kernel_name"] == "python3"
    assert len(entry["ready_pids"]) == 1 and pid_alive(entry["ready_pids"][0])


def test_create_from_warm_pool_is_fresh_and_refills(daemon_factory):
    d = daemon_factory("--pool", "python=2")
    wait_ready(d, 2)
    pooled = set(pool_entry(d)["ready_pids"])
    ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    assert ctx["state"] == "idle" and ctx["pid"] in pooled
    first = d.run(
        "sorted(n for n in globals() if not n.startswith('_'))", context_id=ctx["context_id"]
    )
    # IPython's own names only: no user ever ran code there
    assert first["results"][0]["text"] == "['In', 'Out', 'exit', 'get_ipython', 'quit']"
    assert first["execution_count"] == 1
    d.ok("DELETE", "/contexts/" + ctx["context_id"], status=204)
    wait_ready(d, 2)
    assert ctx["pid"] not in pool_entry(d)["ready_pids"]


def test_isolated_run_uses_the_pool(daemon_factory):
    d = daemon_factory("--pool", "python=1")
    wait_ready(d, 1)
    pooled = pool_entry(d)["ready_pids"][0]
    result = d.run("import os\nprint(os.getpid())", isolated=True)
    assert int(result["logs"]["stdout"]) == pooled
    wait_ready(d, 1)
    assert wait_until(lambda: not pid_alive(pooled), 10)


def test_killed_pooled_kernel_is_replaced(daemon_factory):
    d = daemon_factory("--pool", "python=1")
    wait_ready(d, 1)
    victim = pool_entry(d)["ready_pids"][0]
    os.kill(victim, signal.SIGKILL)
    assert wait_until(
        lambda: pool_entry(d)["ready"] == 1 and victim not in pool_entry(d)["ready_pids"], 60
    )


def test_pool_counts_against_max_contexts(daemon_factory):
    d = daemon_factory("--pool", "python=1", "--max-contexts", "2")
    wait_ready(d, 1)
    a = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    b = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    error_of(d.post("/contexts", {"language": "python"}), 429, "TOO_MANY_CONTEXTS")
    assert pool_entry(d)["ready"] + pool_entry(d)["starting"] == 0  # no room to refill
    d.ok("DELETE", "/contexts/" + a["context_id"], status=204)
    wait_ready(d, 1)  # refilled once there was room
    d.ok("DELETE", "/contexts/" + b["context_id"], status=204)


def test_pool_off_and_bad_values(daemon_factory):
    d = daemon_factory("--pool", "python=0")
    assert pool_entry(d)["target"] == 0 and pool_entry(d)["ready"] == 0
    env_d = daemon_factory(env={"KB_POOL": ""})
    assert env_d.ok("GET", "/health")["pool"] == {}
