"""Durability (SPEC "Durability"): a daemon killed, or stopped with
--keep-kernels, and started again on the same state dir gives back its
contexts (the same kernels, variables intact), its process records and
their logs; kernels that cannot come back are killed and their contexts
say why; a state dir in use, a damaged or newer state.db are refused.

Every daemon here is killed or stopped for real; kernels are found in
/proc by the state dir their connection file lives in, and every test kills
what is left in `finally`.
"""

import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import BINARY, Daemon, error_of, pid_alive, pids_with_arg_under, wait_until
from outside_testlib import start_outside_kernel


@pytest.fixture
def state_dir():
    path = Path(tempfile.mkdtemp(prefix="kbdur-", dir="/tmp")) / "state"
    try:
        yield path
    finally:
        for pid in kernel_pids(path):
            kill_group(pid)
        shutil.rmtree(path.parent, ignore_errors=True)


def kernel_pids(state_dir):
    """Live processes started with a connection file in state_dir/kernels."""
    return pids_with_arg_under(str(state_dir) + "/kernels/")


def kill_group(pid):
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def start(state_dir, *args):
    return Daemon(("--pool", "python=0", *args), state_dir=state_dir)


def crash(d):
    """SIGKILL: nothing is cleaned up, as in a crash."""
    d.proc.kill()
    d.proc.wait(timeout=30)
    shutil.rmtree(d.dir, ignore_errors=True)


def written(d):
    """Everything changed so far is in state.db: nothing held for the next
    batch (KB_PERSIST_HOLD_MS, 20 ms), nothing with the writer. A crash
    keeps what was written (SPEC section 8: up to the last batch)."""
    def settled():
        state = d.ok("GET", "/health")["state"]
        return state["held"] is False and state["behind"] == 0
    assert wait_until(settled, 5), d.ok("GET", "/health")["state"]


def contexts_by_id(d):
    return {c["context_id"]: c for c in d.ok("GET", "/contexts?all=true")["contexts"]}


def test_contexts_come_back_after_sigkill(state_dir):
    d = start(state_dir)
    made = []
    try:
        for i in range(10):
            ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
            made.append(ctx["context_id"])
            assert d.run("x = %d * 7" % i, context_id=ctx["context_id"])["error"] is None
        default = d.run("y = 'default'", language="python")
        assert default["error"] is None
        before = contexts_by_id(d)
        pids = {cid: before[cid]["pid"] for cid in before}
        written(d)  # the last run's count goes with its record, in the next batch
    finally:
        crash(d)
    assert all(pid_alive(pid) for pid in pids.values()), "kernels outlive a killed daemon"
    d = start(state_dir)
    try:
        health = d.ok("GET", "/health")
        assert health["state"]["durable"] is True, health
        after = contexts_by_id(d)
        assert set(after) == set(before), (after, before)
        for cid, ctx in after.items():
            for key in ("language", "kernel_name", "pid", "execution_count", "generation",
                        "created_at"):
                assert ctx[key] == before[cid][key], (key, ctx, before[cid])
        for i, cid in enumerate(made):
            result = d.run("print(x)", context_id=cid)
            assert result["logs"]["stdout"] == "%d\n" % (i * 7), result
            assert result["context"]["generation"] == 1
        assert d.run("print(y)", language="python")["logs"]["stdout"] == "default\n"
        # the same kernels: none started, none left over
        assert sorted(kernel_pids(state_dir)) == sorted(pids.values())
    finally:
        d.close()
    assert kernel_pids(state_dir) == [], "a plain stop shuts the adopted kernels down"


def test_records_and_a_run_in_flight_survive(state_dir):
    d = start(state_dir)
    try:
        done = d.run("print('kept output'); import sys; print('to stderr', file=sys.stderr)",
                     language="python")
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        cid = ctx["context_id"]
        stream = d.run_stream("import time\nprint('before the crash', flush=True)\n"
                              "time.sleep(4)\nprint('after')\nz = 5", context_id=cid)
        events = stream.events()
        start_event = next(events)
        running = start_event.data["process_id"]
        for event in events:
            if "before the crash" in (event.raw or ""):
                break
        time.sleep(0.3)  # the frame reaches state.db within a loop turn
    finally:
        crash(d)
    d = start(state_dir)
    try:
        record = d.ok("GET", "/processes/%s" % done["process"]["process_id"])
        assert record["reason"] == "exited" and record["state"] == "terminal", record
        result = d.ok("GET", "/processes/%s/result" % done["process"]["process_id"])
        assert result["logs"]["stdout"] == "kept output\n", result
        assert result["logs"]["stderr"] == "to stderr\n", result
        stopped = d.ok("GET", "/processes/%s" % running)
        assert stopped["state"] == "terminal" and stopped["reason"] == "sandbox_stopped", stopped
        logs = d.ok("GET", "/processes/%s/logs" % running)
        texts = [frame["data"] for frame in logs["frames"]]
        assert any("before the crash" in t for t in texts), logs
        assert any("daemon stopped" in t for t in texts), logs
        result = d.ok("GET", "/processes/%s/result" % running)
        assert result["process"]["reason"] == "sandbox_stopped", result
        assert result["error"]["name"] == "SandboxStopped", result
        assert result["logs"]["stdout"] == "before the crash\n", result
        # the kernel was busy with that cell: adopted all the same, and the
        # next run waits for the cell to end
        ctx_after = d.ok("GET", "/contexts/%s" % cid)
        assert ctx_after["pid"] == ctx["pid"]
        result = d.run("print(z)", context_id=cid)
        assert result["logs"]["stdout"] == "5\n", result
    finally:
        d.close()


BIG_OUTPUT = (
    "import sys\n"
    "for i in range(%d):\n"
    "    sys.stdout.write(('%%s:%%06d ' %% (TAG, i)) * 8000 + '\\n')\n"
    "    sys.stdout.flush()\n")


def test_large_output_is_kept_in_files_beside_state_db(state_dir):
    """The text of a large frame is appended to its record's file in
    state.db-frames/ (docs/ARCHITECTURE.md, "Durable state"): a killed
    daemon's next one gives it back to the byte; a file cut short (its end
    lost with the machine) gives back what it has and says how much is
    lost; a file no row points to goes at the start; a record's delete
    takes its file."""
    frames = state_dir / "state.db-frames"
    d = start(state_dir)
    try:
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
        runs = {}
        for tag, lines in (("kept", 40), ("cut", 12)):
            result = d.run("TAG = %r\n" % tag + BIG_OUTPUT % lines, context_id=ctx)
            assert result["error"] is None, result
            runs[tag] = (result["process"]["process_id"], result["logs"]["stdout"])
        assert len(runs["kept"][1]) == 40 * 96001, len(runs["kept"][1])  # lines of 96,001 bytes
        written(d)
        files = {name: (frames / name).stat().st_size for name in os.listdir(frames)}
        for tag, (pid, out) in runs.items():
            # every frame of these runs is over 64 KiB: all of its text is in the file
            assert files.get(pid) == len(out.encode()), (tag, files)
        assert (frames / runs["kept"][0]).stat().st_mode & 0o777 == 0o600
        assert frames.stat().st_mode & 0o777 == 0o700
        assert (state_dir / "state.db").stat().st_size < 1024 * 1024, "the text is not in the db"
    finally:
        crash(d)
    cut = 1000
    os.truncate(frames / runs["cut"][0], files[runs["cut"][0]] - cut)
    (frames / "prc_nobodys").write_bytes(b"x" * 100)  # a crash between a file and its row
    d = start(state_dir)
    try:
        assert not (frames / "prc_nobodys").exists(), os.listdir(frames)
        kept = d.ok("GET", "/processes/%s/result" % runs["kept"][0])
        assert kept["logs"]["stdout"] == runs["kept"][1]
        short = d.ok("GET", "/processes/%s/result" % runs["cut"][0])
        assert short["logs"]["stdout"] == runs["cut"][1][:-cut]
        logs = d.ok("GET", "/processes/%s/logs" % runs["cut"][0])["frames"]
        lost = [f["data"] for f in logs if "lost with the machine" in (f["data"] or "")]
        assert lost == ["%d bytes of this output were lost with the machine "
                        "(state.db-frames)" % cut], logs[-3:]
        for pid, _ in runs.values():
            d.ok("DELETE", "/processes/%s" % pid, status=204)
        written(d)
        assert os.listdir(frames) == [], os.listdir(frames)
    finally:
        d.close()


def test_no_adopt_kills_every_kernel(state_dir):
    d = start(state_dir)
    try:
        cid = d.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
        d.run("1", language="python")
        pids = kernel_pids(state_dir)
        assert len(pids) == 2
    finally:
        crash(d)
    d = start(state_dir, "--no-adopt")
    try:
        assert wait_until(lambda: kernel_pids(state_dir) == [], 10), kernel_pids(state_dir)
        # a killed process is gone a moment after its command line
        assert wait_until(lambda: not any(pid_alive(p) for p in pids), 10)
        body = error_of(d.get("/contexts/%s" % cid), 404, "SESSION_NOT_FOUND")
        assert "--no-adopt" in body["message"], body
        assert [c for c in d.ok("GET", "/contexts?all=true")["contexts"]] == []
        assert os.listdir(state_dir / "kernels") == [], "no stale connection file or log"
    finally:
        d.close()


def test_keep_kernels_hands_them_to_the_next_daemon(state_dir):
    d = start(state_dir, "--keep-kernels")
    try:
        cid = d.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
        d.run("kept = 'yes'", context_id=cid)
        pid = d.ok("GET", "/contexts/%s" % cid)["pid"]
    finally:
        d.close()  # SIGTERM, exit 0
    assert pid_alive(pid), "--keep-kernels leaves the kernel running"
    d = start(state_dir)
    try:
        ctx = d.ok("GET", "/contexts/%s" % cid)
        assert ctx["pid"] == pid and ctx["execution_count"] == 1, ctx
        assert d.run("print(kept)", context_id=cid)["logs"]["stdout"] == "yes\n"
    finally:
        d.close()
    assert wait_until(lambda: not pid_alive(pid), 10)


def test_kernel_gone_while_down_and_pid_reused(state_dir):
    d = start(state_dir)
    try:
        dead = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        reused = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    finally:
        crash(d)
    for ctx in (dead, reused):
        kill_group(ctx["pid"])
        assert wait_until(lambda: not pid_alive(ctx["pid"]), 10)
    # the other row's pid is now another process's, one that is no kernel
    # (a reused pid: same number, another start time): it must be neither
    # adopted nor signalled
    other_process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        db = sqlite3.connect(str(state_dir / "state.db"))
        with db:
            assert db.execute("UPDATE contexts SET pid = ? WHERE id = ?",
                              (other_process.pid, reused["context_id"])).rowcount == 1
        db.close()
        d = start(state_dir)
        try:
            gone = error_of(d.get("/contexts/%s" % dead["context_id"]), 404, "SESSION_NOT_FOUND")
            assert "did not come back" in gone["message"], gone
            other = error_of(d.get("/contexts/%s" % reused["context_id"]), 404,
                             "SESSION_NOT_FOUND")
            assert "another process" in other["message"], other
            assert other_process.poll() is None, "a pid that is not our kernel any more is killed"
        finally:
            d.close()
        assert other_process.poll() is None
    finally:
        other_process.kill()
        other_process.wait()


def refused(state_dir, *args):
    out = subprocess.run([BINARY, "serve", "--listen", "127.0.0.1:0", "--pool", "python=0",
                          "--state-dir", str(state_dir), *args],
                         capture_output=True, text=True, timeout=60)
    return out.returncode, out.stderr


def test_state_dir_in_use_damaged_or_newer_is_refused(state_dir):
    d = start(state_dir)
    try:
        code, err = refused(state_dir)
        assert code == 2 and "in use" in err and str(d.proc.pid) in err, err
    finally:
        d.close()
    db = sqlite3.connect(str(state_dir / "state.db"))
    db.execute("PRAGMA user_version = 99")
    db.close()  # the last connection: the WAL is checkpointed into the file
    before = (state_dir / "state.db").read_bytes()
    code, err = refused(state_dir)
    assert code == 2 and "newer" in err and "99" in err, err
    assert (state_dir / "state.db").read_bytes() == before, "a newer file is left as it is"
    for name in os.listdir(state_dir):
        if name.startswith("state.db"):
            os.unlink(state_dir / name)
    garbage = os.urandom(8192)
    (state_dir / "state.db").write_bytes(garbage)
    code, err = refused(state_dir)
    assert code == 2 and "state.db" in err, err
    assert (state_dir / "state.db").read_bytes() == garbage, "a damaged file is not deleted"


def test_ephemeral_keeps_nothing(tmp_path):
    d = Daemon(("--pool", "python=0", "--ephemeral"), state_dir=None)
    try:
        health = d.ok("GET", "/health")
        assert health["state"]["durable"] is False, health
    finally:
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=30)
        shutil.rmtree(d.dir, ignore_errors=True)
    code = subprocess.run([BINARY, "serve", "--ephemeral", "--state-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=30)
    assert code.returncode == 2 and "exclude" in code.stderr, code.stderr


def test_crash_cycles_leave_no_orphan_and_lose_no_record(state_dir):
    records = []
    cid = None
    for cycle in range(20):
        d = start(state_dir)
        try:
            if cid is None:
                cid = d.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
                d.run("n = 0", context_id=cid)
            result = d.run("n += 1; print(n)", context_id=cid)
            assert result["logs"]["stdout"] == "%d\n" % (cycle + 1), (cycle, result)
            records.append(result["process"]["process_id"])
            if cycle % 5 == 4:
                d.ok("POST", "/contexts/%s/restart" % cid)  # a new kernel, one more generation
                d.run("n = %d" % (cycle + 1), context_id=cid)
            # its record is written within the batch's hold (20 ms): a
            # crash loses only what ended since the last batch
            assert wait_until(lambda: _running_in_db(state_dir, records[-1]) == 0, 5)
        finally:
            crash(d)
        assert len(kernel_pids(state_dir)) == 1, (cycle, kernel_pids(state_dir))
    d = start(state_dir)
    try:
        kept = {p["process_id"] for p in d.ok("GET", "/processes")["processes"]}
        assert set(records) <= kept, set(records) - kept
        ctx = d.ok("GET", "/contexts/%s" % cid)
        assert ctx["generation"] == 5, ctx
        files = sorted(os.listdir(state_dir / "kernels"))
        assert len(files) == 2, files  # the one kernel's connection file and log
    finally:
        d.close()
    assert kernel_pids(state_dir) == []


@pytest.fixture
def outside_kernel(tmp_path):
    """An ipykernel this test starts itself, from a connection file it wrote."""
    info, proc = start_outside_kernel(tmp_path / "outside.json")
    try:
        yield info, proc
    finally:
        kill_group(proc.pid)
        proc.wait(timeout=30)


def test_connection_info_attaches_a_running_kernel(state_dir, outside_kernel):
    info, proc = outside_kernel
    d = start(state_dir)
    try:
        # malformed: refused at once, by field
        body = error_of(d.post("/contexts", {"language": "python",
                                             "connection_info": dict(info, key=None)}),
                        400, "BAD_REQUEST")
        assert "key" in body["message"], body
        body = error_of(d.post("/contexts", {"language": "python", "connection_info":
                                             dict(info, shell_port=70000)}), 400, "BAD_REQUEST")
        assert "shell_port" in body["message"], body
        # a wrong key: the kernel drops what we send, and we say so
        wrong = error_of(d.post("/contexts", {"language": "python", "connection_info":
                                              dict(info, key="0" * 32)}), 400, "BAD_REQUEST")
        assert "key or ports" in wrong["message"], wrong
        ctx = None
        deadline = time.monotonic() + 60
        while ctx is None:  # the kernel may still be starting up
            r = d.post("/contexts", {"language": "python", "connection_info": info})
            if r.status == 201:
                ctx = r.json
            elif time.monotonic() > deadline:
                raise AssertionError(r)
        assert ctx["pid"] is None, ctx  # not a process of ours
        cid = ctx["context_id"]
        result = d.run("import os; attached = os.getpid(); print(attached)", context_id=cid)
        assert result["logs"]["stdout"] == "%d\n" % proc.pid, result
    finally:
        crash(d)
    assert proc.poll() is None
    d = start(state_dir)
    try:
        again = d.ok("GET", "/contexts/%s" % cid)
        assert again["pid"] is None
        result = d.run("print(attached)", context_id=cid)
        assert result["logs"]["stdout"] == "%d\n" % proc.pid, result
    finally:
        d.close()


def test_pool_kernels_go_back_to_the_pool(state_dir):
    d = Daemon(("--pool", "python=1"), state_dir=state_dir)
    try:
        assert wait_until(lambda: d.ok("GET", "/health")["pool"]["python"]["ready"] == 1, 60)
        pids = d.ok("GET", "/health")["pool"]["python"]["ready_pids"]
        assert len(pids) == 1, pids
    finally:
        crash(d)
    d = Daemon(("--pool", "python=1"), state_dir=state_dir)
    try:
        assert wait_until(lambda: d.ok("GET", "/health")["pool"]["python"]["ready"] == 1, 30)
        assert d.ok("GET", "/health")["pool"]["python"]["ready_pids"] == pids
        assert kernel_pids(state_dir) == pids, "adopted, not started again"
        # a context takes it as it takes any pooled kernel
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        assert ctx["pid"] == pids[0], ctx
        assert d.run("print(6 * 7)", context_id=ctx["context_id"])["logs"]["stdout"] == "42\n"
    finally:
        d.close()


def test_a_jupyter_kernel_survives_a_crash_with_its_id_limits_and_state(state_dir):
    """A kernel started through Jupyter's API is a context like any other:
    its limits come from the daemon's defaults, and after a SIGKILL of the
    daemon it comes back under the same kernel id, with its variables, and
    a websocket drives it again."""
    from test_jupyter_ws import Client, of_type

    d = start(state_dir, "--memory-limit", "1G")
    try:
        kid = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)["id"]
        ctx = d.ok("GET", "/contexts/" + kid)
        assert ctx["memory_limit"] == 1 << 30 and ctx["kernel_id"] == kid, ctx
        c = Client(d, kid)
        try:
            got = c.until_done(c.execute("kept = 'over the crash'"))
            assert of_type(got, "execute_reply")[0]["content"]["status"] == "ok"
        finally:
            c.close()
    finally:
        crash(d)
    d = start(state_dir, "--memory-limit", "1G")
    try:
        # busy until the adopted kernel answers the shell barrier (a
        # kernel_info_request behind any cell of the old daemon's), then idle
        assert wait_until(lambda: d.ok("GET", "/api/kernels/" + kid)["execution_state"] == "idle",
                          10)
        model = d.ok("GET", "/api/kernels/" + kid)
        assert model["id"] == kid and model["execution_state"] == "idle", model
        after = d.ok("GET", "/contexts/" + kid)
        assert after["generation"] == ctx["generation"] and after["pid"] == ctx["pid"], after
        assert after["memory_limit"] == 1 << 30, after
        c = Client(d, kid)
        try:
            got = c.until_done(c.execute("kept"))
            result = of_type(got, "execute_result")[0]["content"]["data"]["text/plain"]
            assert result == "'over the crash'", got
        finally:
            c.close()
        d.ok("DELETE", "/api/kernels/" + kid, status=204)
    finally:
        d.close()


def test_forks_and_checkpoints_survive_a_crash(state_dir):
    """SPEC section 13: a fork keeps its forked_from, a checkpoint stays
    frozen and restorable, after the daemon is SIGKILLed; a checkpoint of a
    context that did not come back ends."""
    d = start(state_dir)
    try:
        d.ok("POST", "/contexts", {"language": "python", "context_id": "p"}, status=201)
        d.run("x = 1", context_id="p")
        fork = d.ok("POST", "/contexts/p/fork", {"context_ids": ["f"]}, status=201)["contexts"][0]
        cp = d.ok("POST", "/contexts/p/checkpoints", {}, status=201)
        d.ok("POST", "/contexts", {"language": "python", "context_id": "gone"}, status=201)
        lost = d.ok("POST", "/contexts/gone/checkpoints", {}, status=201)
        d.run("x = 2", context_id="p")
        gone_pid = d.ok("GET", "/contexts/gone")["pid"]
    finally:
        crash(d)
    kill_group(gone_pid)  # its context cannot come back
    sockets = lambda: sorted(n for n in os.listdir(state_dir / "kernels") if n.endswith(".sock"))
    assert len(sockets()) == 2
    d = start(state_dir)
    try:
        after = contexts_by_id(d)
        assert set(after) == {"p", "f"}, after
        assert after["f"]["forked_from"] == fork["forked_from"]
        assert after["f"]["pid"] == fork["pid"]
        listed = d.ok("GET", "/contexts/p/checkpoints")["checkpoints"]
        assert [c["checkpoint_id"] for c in listed] == [cp["checkpoint_id"]]
        assert lost["checkpoint_id"] not in d.get("/contexts/gone/checkpoints").body.decode()
        assert wait_until(lambda: len(sockets()) == 1, 15), sockets()
        ctx = d.ok("POST", "/contexts/p/restore", {"checkpoint_id": cp["checkpoint_id"]})
        assert ctx["generation"] == 2
        assert d.run("x", context_id="p")["results"][0]["text"] == "1"
    finally:
        d.close()
    assert wait_until(lambda: sockets() == [], 15), sockets()


def _running_in_db(state_dir, process_id):
    db = sqlite3.connect("file:%s?mode=ro" % (state_dir / "state.db"), uri=True, timeout=5)
    try:
        row = db.execute("SELECT running FROM records WHERE id = ?", (process_id,)).fetchone()
    finally:
        db.close()
    return None if row is None else row[0]


def test_a_short_run_is_one_batch_and_a_long_one_is_written_while_it_runs(state_dir):
    """A run's first row waits (at most KB_PERSIST_HOLD_MS, 20 ms) to go
    with its end, and its context's count with it: at most one batch per
    short run, and once /health says nothing is held or behind, every
    record is in state.db ended and the count is the last run's; a longer
    run's record is in state.db while it runs, and ended once it has."""
    d = start(state_dir)
    try:
        ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
        cid = ctx["context_id"]
        assert d.run("1+1", context_id=cid)["error"] is None
        n = 20
        before = d.ok("GET", "/health")["state"]["batches"]
        for _ in range(n):
            assert d.run("1+1", context_id=cid)["results"][0]["text"] == "2"
        batches = d.ok("GET", "/health")["state"]["batches"] - before
        assert 1 <= batches <= n, batches  # two per run before runs were held, one before
        # their contexts' counts were
        written(d)
        db = sqlite3.connect("file:%s?mode=ro" % (state_dir / "state.db"), uri=True, timeout=5)
        try:
            ended = db.execute("SELECT count(*) FROM records WHERE context_id = ? AND running = 0",
                               (cid,)).fetchone()[0]
            count = db.execute("SELECT execution_count FROM contexts WHERE id = ?",
                               (cid,)).fetchone()[0]
        finally:
            db.close()
        assert ended == n + 1 and count == n + 1, (ended, count)
        stream = d.run_stream("import time\ntime.sleep(1.5)", context_id=cid)
        events = stream.events()
        process_id = next(events).data["process_id"]
        time.sleep(0.5)
        assert _running_in_db(state_dir, process_id) == 1
        for _ in events:
            pass
        assert wait_until(lambda: _running_in_db(state_dir, process_id) == 0, 5)
    finally:
        d.close()
