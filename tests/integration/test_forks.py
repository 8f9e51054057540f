"""Forks, checkpoints and restores through the daemon (SPEC section 13), with
real ipykernel kernels: what a fork carries and what it does not, that the
parent is not disturbed, the queue order, checkpoints and restores, kernels
that cannot fork, and bad input."""

import os
import signal
import threading
import time

from conftest import error_of, pid_alive, wait_until

PARENT_STATE = """
import os, sys, random
import numpy as np
import pandas as pd
x = 41
def double(v):
    return 2 * v
class Point:
    def __init__(self, a): self.a = a
arr = np.arange(1_000_000, dtype=np.float64)
df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
os.makedirs(WORK, exist_ok=True)
os.chdir(WORK)
os.environ["FORK_VAR"] = "from-parent"
_ = np.ones((200, 200)) @ np.ones((200, 200))  # the parent used BLAS's threads
"""


def fork(daemon, ctx_id, body=None, status=201):
    return daemon.ok("POST", "/contexts/%s/fork" % ctx_id, body or {}, status=status)


def text(result):
    assert result["error"] is None, result["error"]
    return result["results"][0]["text"]


def new_python(daemon, ctx_id, **fields):
    return daemon.ok("POST", "/contexts", dict(language="python", context_id=ctx_id, **fields),
                     status=201)


def test_fork_carries_state_and_leaves_the_parent_alone(daemon, tmp_path):
    parent = new_python(daemon, "parent")
    work = str(tmp_path / "work")
    daemon.run("WORK = %r\n%s" % (work, PARENT_STATE), context_id="parent")
    daemon.run("41", context_id="parent")
    before = daemon.ok("GET", "/contexts/parent")

    answer = fork(daemon, "parent")
    assert len(answer["contexts"]) == 1
    child = answer["contexts"][0]
    cid = child["context_id"]
    assert cid.startswith("ctx_") and child["generation"] == 1
    assert child["forked_from"] == {"context_id": "parent", "execution_count": 2,
                                    "generation": 1}
    assert child["pid"] != parent["pid"] and pid_alive(child["pid"])
    assert child["language"] == "python" and child["kernel_name"] == parent["kernel_name"]

    # Everything the namespace held, the cwd and the environment.
    got = daemon.run(
        "print(x, double(x), Point(3).a, float(arr.sum()), list(df['b']))\n"
        "print(os.getcwd()); print(os.environ['FORK_VAR']); print(In[1][:5])\n"
        "print(float((np.ones((300, 300)) @ np.ones((300, 300)))[0, 0]))\n"
        "print(os.getpgid(0) == os.getpid(), os.getppid() != %d)" % parent["pid"],
        context_id=cid)
    assert got["error"] is None, got["error"]
    lines = got["logs"]["stdout"].splitlines()
    assert lines[0] == "41 82 3 499999500000.0 ['x', 'y', 'z']"
    assert lines[1:] == [work, "from-parent", "WORK ", "300.0", "True True"], lines
    assert got["execution_count"] == 3  # the parent's next number

    # The parent is not disturbed: count, pid, variables, cwd.
    after = daemon.ok("GET", "/contexts/parent")
    assert after["execution_count"] == before["execution_count"] == 2
    assert after["pid"] == before["pid"] and after["generation"] == 1
    daemon.run("x = 'changed in the fork'; arr[:] = 0", context_id=cid)
    assert text(daemon.run("x", context_id="parent")) == "41"
    assert text(daemon.run("float(arr.sum())", context_id="parent")) == "499999500000.0"


def test_every_output_type_in_a_fork(daemon):
    new_python(daemon, "p")
    daemon.run("%matplotlib inline\nimport matplotlib.pyplot as plt\n"
               "from IPython.display import display, clear_output, update_display",
               context_id="p")
    cid = fork(daemon, "p")["contexts"][0]["context_id"]
    r = daemon.run("plt.plot([1, 2, 3]); plt.show()", context_id=cid)
    assert r["error"] is None and any(o["png"] for o in r["results"]), r
    # the display extension the parent's kernel loaded at start is the fork's too
    charts = [o["chart"] for o in r["results"] if o.get("chart")]
    assert charts and charts[0]["type"] == "line", r["results"]
    r = daemon.run("h = display('one', display_id=True)\nh.update('two')\n'main'",
                   context_id=cid)
    texts = [o["text"] for o in r["results"]]
    assert "'main'" in texts and ("'two'" in texts or "'one'" in texts), r
    r = daemon.run("print('gone'); clear_output(); print('kept')", context_id=cid)
    assert r["logs"]["stdout"] == "kept\n", r
    r = daemon.run("1 / 0", context_id=cid)
    assert r["error"]["name"] == "ZeroDivisionError" and r["error"]["traceback"], r
    # timeout (an interrupt) and restart work on a fork
    r = daemon.run("import time; time.sleep(30)", context_id=cid, timeout=1)
    assert r["process"]["reason"] == "timed_out", r["process"]
    assert text(daemon.run("2 + 2", context_id=cid)) == "4"
    restarted = daemon.ok("POST", "/contexts/%s/restart" % cid)
    assert restarted["generation"] == 2
    r = daemon.run("plt", context_id=cid)
    assert r["error"]["name"] == "NameError"
    r = daemon.delete("/contexts/%s" % cid)
    assert r.status == 204


def test_forks_are_independent(daemon):
    parent = new_python(daemon, "p")
    daemon.run("import random, subprocess, threading, time\nimport numpy as np\n"
               "child = subprocess.Popen(['sleep', '60'])\n"
               "t = threading.Thread(target=time.sleep, args=(60,), daemon=True); t.start()",
               context_id="p")
    forks = fork(daemon, "p", {"count": 2})["contexts"]
    a, b = (f["context_id"] for f in forks)
    assert forks[0]["pid"] != forks[1]["pid"]
    draws = [daemon.run("print(random.random(), np.random.random())", context_id=c)
             ["logs"]["stdout"] for c in (a, b)]
    assert draws[0] != draws[1], draws
    # the parent's child process is not the fork's; its user thread is gone
    r = daemon.run("import os\nstat = open('/proc/%d/stat' % child.pid).read()\n"
                   "print(t.is_alive(), stat.rsplit(') ', 1)[1].split()[1] == str(os.getpid()))",
                   context_id=a)
    assert r["logs"]["stdout"] == "False False\n", r
    assert text(daemon.run("1 + 1", context_id=a)) == "2"  # the kernel works without them
    # deleting the parent kills neither fork
    assert daemon.delete("/contexts/p").status == 204
    assert wait_until(lambda: not pid_alive(parent["pid"]), 15)
    assert text(daemon.run("'alive'", context_id=b)) == "'alive'"
    assert pid_alive(forks[0]["pid"]) and pid_alive(forks[1]["pid"])


def test_forks_of_forks_ten_deep(daemon):
    new_python(daemon, "d0")
    daemon.run("depth = [0]", context_id="d0")
    for level in range(1, 11):
        body = {"fork_from": "d%d" % (level - 1), "context_id": "d%d" % level}
        ctx = daemon.ok("POST", "/contexts", body, status=201)
        assert ctx["context_id"] == "d%d" % level
        assert ctx["forked_from"]["context_id"] == "d%d" % (level - 1)
        daemon.run("depth.append(%d)" % level, context_id="d%d" % level)
    assert text(daemon.run("depth", context_id="d10")) == str(list(range(11)))
    assert text(daemon.run("depth", context_id="d0")) == "[0]"


def test_per_run_cwd_and_env_and_a_dead_parent(daemon, tmp_path):
    parent = new_python(daemon, "p")
    cid = fork(daemon, "p")["contexts"][0]["context_id"]
    r = daemon.run("import os\nprint(os.getcwd(), os.environ.get('RUN_VAR'))", context_id=cid,
                   cwd=str(tmp_path), env={"RUN_VAR": "v"})
    assert r["logs"]["stdout"] == "%s v\n" % tmp_path, r
    assert daemon.run("print(os.environ.get('RUN_VAR'))", context_id=cid)["logs"]["stdout"] \
        == "None\n"
    # a parent whose kernel died has vanished: nothing to fork
    os.kill(parent["pid"], signal.SIGKILL)
    assert wait_until(lambda: daemon.get("/contexts/p").status == 404, 15)
    error_of(daemon.post("/contexts/p/fork", {}), 404, "SESSION_NOT_FOUND")
    assert text(daemon.run("1 + 1", context_id=cid)) == "2"  # the fork lives on


def test_named_forks_and_bad_requests(daemon):
    new_python(daemon, "p")
    made = fork(daemon, "p", {"context_ids": ["f1", "f2", "f3"]})["contexts"]
    assert [c["context_id"] for c in made] == ["f1", "f2", "f3"]
    error_of(daemon.post("/contexts/p/fork", {"context_ids": ["f1"]}), 409, "CONTEXT_EXISTS")
    for body in ({"count": 0}, {"count": 65}, {"count": "2"}, {"count": 2, "context_ids": ["z"]},
                 {"context_ids": []}, {"context_ids": ["a", "a"]}, {"context_ids": ["bad id"]},
                 {"context_ids": "a"}, {"memory_limit": -1}):
        error_of(daemon.post("/contexts/p/fork", body), 400, "BAD_REQUEST")
    error_of(daemon.post("/contexts/p/fork", b"{not json"), 400, "INVALID_REQUEST_BODY")
    error_of(daemon.post("/contexts/nope/fork", {}), 404, "SESSION_NOT_FOUND")
    error_of(daemon.post("/contexts", {"fork_from": "nope"}), 404, "SESSION_NOT_FOUND")
    error_of(daemon.post("/contexts", {"fork_from": "p", "language": "python"}), 400,
             "BAD_REQUEST")
    error_of(daemon.post("/contexts", {"fork_from": "p", "context_id": "f1"}), 409,
             "CONTEXT_EXISTS")
    # nothing half-made: the three forks and the parent, no more
    listed = sorted(c["context_id"] for c in daemon.ok("GET", "/contexts")["contexts"])
    assert listed == ["f1", "f2", "f3", "p"]
    metrics = daemon.get("/metrics").body.decode()
    assert "kernelbridge_forks_total 3" in metrics, metrics


def test_a_fork_waits_for_the_run_before_it(daemon):
    new_python(daemon, "p")
    done = {}

    def slow_run():
        done["run"] = daemon.run("import time; time.sleep(2); y = 'after the run'",
                                 context_id="p")

    thread = threading.Thread(target=slow_run)
    thread.start()
    assert wait_until(lambda: daemon.ok("GET", "/contexts/p")["state"] == "busy", 30)
    cid = fork(daemon, "p")["contexts"][0]["context_id"]
    thread.join(60)
    assert done["run"]["error"] is None
    assert text(daemon.run("y", context_id=cid)) == "'after the run'"


def test_kernels_that_cannot_fork(daemon):
    specs = {s["name"]: s for s in daemon.ok("GET", "/kernelspecs")["kernelspecs"]}
    assert specs["python3"]["fork"] is True
    assert specs["bash"]["fork"] is False
    if "xpython" in specs:
        assert specs["xpython"]["fork"] is False
    daemon.ok("POST", "/contexts", {"language": "bash", "context_id": "b"}, status=201)
    for method, path, body in (("POST", "/contexts/b/fork", {}),
                               ("POST", "/contexts/b/checkpoints", {}),
                               ("POST", "/contexts/b/restore", {"checkpoint_id": "cp_x"})):
        err = error_of(daemon.request(method, path, body), 400, "UNSUPPORTED_OPTION")
        assert "ipykernel" in err["message"], err
    error_of(daemon.post("/contexts", {"fork_from": "b"}), 400, "UNSUPPORTED_OPTION")


def test_checkpoint_restore_and_delete(daemon_factory):
    daemon = daemon_factory("--max-checkpoints", "2")
    new_python(daemon, "p")
    new_python(daemon, "other")
    daemon.run("x = 1", context_id="p")
    cp = daemon.ok("POST", "/contexts/p/checkpoints", {}, status=201)
    assert cp["checkpoint_id"].startswith("cp_") and cp["context_id"] == "p"
    assert cp["execution_count"] == 1 and cp["memory_bytes"] > 0
    assert cp["memory_bytes"] < 64 << 20, cp  # a frozen fork shares the parent's pages
    daemon.run("x = 2", context_id="p")
    listed = daemon.ok("GET", "/contexts/p/checkpoints")["checkpoints"]
    assert [c["checkpoint_id"] for c in listed] == [cp["checkpoint_id"]]
    assert daemon.ok("GET", "/contexts/other/checkpoints") == {"checkpoints": []}

    old_pid = daemon.ok("GET", "/contexts/p")["pid"]
    for generation in (2, 3):  # the checkpoint stays restorable
        ctx = daemon.ok("POST", "/contexts/p/restore", {"checkpoint_id": cp["checkpoint_id"]})
        assert ctx["generation"] == generation and ctx["context_id"] == "p"
        assert ctx["restored_from"] == {"checkpoint_id": cp["checkpoint_id"],
                                        "execution_count": 1}
        r = daemon.run("x", context_id="p")
        assert text(r) == "1" and r["execution_count"] == 2
        daemon.run("x = 3", context_id="p")
    assert wait_until(lambda: not pid_alive(old_pid), 15)

    second = daemon.ok("POST", "/contexts/p/checkpoints", status=201)
    error_of(daemon.post("/contexts/p/checkpoints", {}), 409, "LIMIT_EXCEEDED")
    # another context's checkpoint, an unknown one, a bad body
    error_of(daemon.post("/contexts/other/restore", {"checkpoint_id": cp["checkpoint_id"]}),
             404, "CHECKPOINT_NOT_FOUND")
    error_of(daemon.post("/contexts/p/restore", {"checkpoint_id": "cp_0"}), 404,
             "CHECKPOINT_NOT_FOUND")
    error_of(daemon.post("/contexts/p/restore", {}), 400, "BAD_REQUEST")
    error_of(daemon.post("/contexts/nope/checkpoints", {}), 404, "SESSION_NOT_FOUND")
    r = daemon.delete("/contexts/p/checkpoints/%s" % cp["checkpoint_id"])
    assert r.status == 204
    error_of(daemon.delete("/contexts/p/checkpoints/%s" % cp["checkpoint_id"]), 404,
             "CHECKPOINT_NOT_FOUND")
    error_of(daemon.post("/contexts/p/restore", {"checkpoint_id": cp["checkpoint_id"]}), 404,
             "CHECKPOINT_NOT_FOUND")
    # deleting the context ends its checkpoints' processes and sockets
    sockets = lambda: [n for n in os.listdir(daemon.state_dir / "kernels") if n.endswith(".sock")]
    assert len(sockets()) == 1
    assert daemon.delete("/contexts/p").status == 204
    assert wait_until(lambda: sockets() == [], 15), sockets()
    assert second["checkpoint_id"] not in daemon.get("/contexts/other/checkpoints").body.decode()


def test_a_fork_while_its_parent_is_deleted(daemon):
    new_python(daemon, "p")
    got = {}

    def busy_then_fork():
        got["run"] = daemon.run("import time; time.sleep(3)", context_id="p")

    runner = threading.Thread(target=busy_then_fork)
    runner.start()
    assert wait_until(lambda: daemon.ok("GET", "/contexts/p")["state"] == "busy", 30)
    forker = threading.Thread(target=lambda: got.update(fork=daemon.post("/contexts/p/fork", {})))
    forker.start()
    time.sleep(0.5)  # the fork waits in the queue behind the run
    assert daemon.delete("/contexts/p").status == 204
    forker.join(60)
    runner.join(60)
    error_of(got["fork"], 404, "SESSION_NOT_FOUND")
    assert [c["context_id"] for c in daemon.ok("GET", "/contexts")["contexts"]] == []


def test_sixty_four_forks_at_the_memory_limit(daemon_factory):
    daemon = daemon_factory("--max-contexts", "80")
    new_python(daemon, "p", memory_limit=512 << 20)
    daemon.run("import numpy as np\ndata = np.ones(8 << 20)", context_id="p")  # 64 MiB
    forks = fork(daemon, "p", {"count": 64})["contexts"]
    assert len({f["pid"] for f in forks}) == 64
    assert all(f["memory_limit"] == 512 << 20 for f in forks)
    for f in forks[::16]:
        assert text(daemon.run("float(data.sum())", context_id=f["context_id"])) == "8388608.0"
    error_of(daemon.post("/contexts/p/fork", {"count": 16}), 429, "TOO_MANY_CONTEXTS")
    for f in forks:
        assert daemon.delete("/contexts/%s" % f["context_id"]).status == 204
    assert wait_until(lambda: not any(pid_alive(f["pid"]) for f in forks), 30)


def test_rollback_on_error_keeps_the_state_before_the_run(daemon_factory):
    daemon = daemon_factory()
    new_python(daemon, "p", memory_limit=300 << 20)
    daemon.run("x = 1\nimport numpy as np", context_id="p")
    failing = [
        ("x = 2\n1 / 0", "exited"),
        ("x = 3\nimport time; time.sleep(30)", "timed_out"),
        ("x = 4\nimport os; os._exit(1)", "failed"),
        ("x = 5\nimport ctypes; ctypes.string_at(0)", "failed"),
        ("x = 6\nhog = np.ones(400 << 17)", None),  # 400 MiB, over the limit
    ]
    generation = 1
    for code, reason in failing:
        r = daemon.run(code, context_id="p", rollback="on_error", timeout=8)
        generation += 1
        assert r["rolled_back"] is True, (code, r)
        assert reason is None or r["process"]["reason"] == reason, (code, r["process"])
        assert r["context"]["generation"] == generation, r["context"]
        record = daemon.ok("GET", "/processes/%s" % r["process"]["process_id"])
        assert record["rolled_back"] is True
        after = daemon.run("x", context_id="p")
        assert text(after) == "1", (code, after)
        assert daemon.ok("GET", "/contexts/p")["generation"] == generation
    # a run that succeeds keeps what it did, and the generation
    r = daemon.run("x = 7", context_id="p", rollback="on_error")
    assert r["rolled_back"] is False and r["context"]["generation"] == generation
    assert text(daemon.run("x", context_id="p")) == "7"
    # without rollback: no field, and an error keeps the state
    r = daemon.run("x = 8\n1 / 0", context_id="p")
    assert "rolled_back" not in r
    assert text(daemon.run("x", context_id="p")) == "8"
    # nothing is left of the checkpoints taken for the runs
    assert daemon.ok("GET", "/contexts/p/checkpoints") == {"checkpoints": []}
    assert not [n for n in os.listdir(daemon.state_dir / "kernels") if n.endswith(".sock")]
    error_of(daemon.post("/run", {"code": "1", "context_id": "p", "rollback": "maybe"}), 400,
             "BAD_REQUEST")
    error_of(daemon.post("/run", {"code": "1", "isolated": True, "rollback": "on_error"}), 400,
             "BAD_REQUEST")
    daemon.ok("POST", "/contexts", {"language": "bash", "context_id": "b"}, status=201)
    error_of(daemon.post("/run", {"code": "echo", "context_id": "b", "rollback": "on_error"}),
             400, "UNSUPPORTED_OPTION")
    metrics = daemon.get("/metrics").body.decode()
    assert "kernelbridge_restores_total 5" in metrics, metrics
