"""Process records over HTTP (SPEC section 4 and 5): list, get, result,
logs (paged and followed), wait, signals, delete; runs outliving their
client."""

import threading
import time

from conftest import error_of

RECORD_FIELDS = {"process_id", "kind", "state", "context_id", "language", "started_at",
                 "ended_at", "exit_code", "signal", "reason", "raw_reason"}


def start_run(daemon, code, **fields):
    """Submit a run as a stream; returns (stream, events iterator, process_id)."""
    stream = daemon.run_stream(code, **fields)
    events = stream.events()
    start = next(events)
    assert start.event == "start", start
    return stream, events, start.data["process_id"]


def test_record_list_get_result_delete(daemon):
    cid = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
    done = daemon.run("print('hi')", context_id=cid)
    pid = done["process"]["process_id"]
    other = daemon.run("2")["process"]["process_id"]

    record = daemon.ok("GET", "/processes/%s" % pid)
    assert RECORD_FIELDS <= set(record), record
    assert record["kind"] == "code" and record["state"] == "terminal"
    assert record["context_id"] == cid and record["language"] == "python"
    assert record["exit_code"] == 0 and record["reason"] == "exited"
    assert record["ended_at"]

    every = {p["process_id"] for p in daemon.ok("GET", "/processes")["processes"]}
    assert {pid, other} <= every
    mine = daemon.ok("GET", "/processes?context_id=%s" % cid)["processes"]
    assert [p["process_id"] for p in mine] == [pid]
    assert daemon.ok("GET", "/processes?state=running")["processes"] == []
    terminal = {p["process_id"] for p in daemon.ok("GET", "/processes?state=terminal")["processes"]}
    assert {pid, other} <= terminal

    result = daemon.ok("GET", "/processes/%s/result" % pid)
    assert result["process"]["process_id"] == pid
    assert result["logs"]["stdout"] == "hi\n"

    r = daemon.delete("/processes/%s" % pid)
    assert r.status == 204
    error_of(daemon.get("/processes/%s" % pid), 404, "PROCESS_NOT_FOUND")
    error_of(daemon.get("/processes/%s/result" % pid), 404, "PROCESS_NOT_FOUND")
    error_of(daemon.delete("/processes/%s" % pid), 404, "PROCESS_NOT_FOUND")
    for path in ("/processes/prc_none", "/processes/prc_none/result",
                 "/processes/prc_none/logs", "/processes/prc_none/wait?timeout=0",
                 "/processes/prc_none/logs?follow=true"):
        error_of(daemon.get(path), 404, "PROCESS_NOT_FOUND")
    error_of(daemon.get("/processes/" + "p" * 300), 404, "PROCESS_NOT_FOUND")


def test_running_record_conflicts_and_wait(daemon):
    stream, events, pid = start_run(daemon, "import time; time.sleep(2); print('end')")
    try:
        record = daemon.ok("GET", "/processes/%s" % pid)
        assert record["state"] == "running"
        assert pid in {p["process_id"] for p in
                       daemon.ok("GET", "/processes?state=running")["processes"]}
        error_of(daemon.get("/processes/%s/result" % pid), 409, "PROCESS_RUNNING")
        error_of(daemon.delete("/processes/%s" % pid), 409, "PROCESS_RUNNING")
        began = time.monotonic()
        short = daemon.ok("GET", "/processes/%s/wait?timeout=0.2" % pid)
        assert time.monotonic() - began < 1.5
        assert short["state"] == "running"
        assert short["exit_code"] is None and short["reason"] is None
        full = daemon.ok("GET", "/processes/%s/wait?timeout=30" % pid)
        assert full["state"] == "terminal" and full["exit_code"] == 0
        assert full["reason"] == "exited" and full["signal"] is None
        rest = list(events)
    finally:
        stream.close()
    assert rest[-1].event == "result"
    assert daemon.ok("GET", "/processes/%s/result" % pid)["logs"]["stdout"] == "end\n"


def test_logs_paging(daemon):
    code = "import sys\nfor i in range(5):\n    print('line', i, flush=True)\n    sys.stderr.write('err%d\\n' % i); sys.stderr.flush()\n"
    pid = daemon.run(code)["process"]["process_id"]
    logs = daemon.ok("GET", "/processes/%s/logs" % pid)
    frames = logs["frames"]
    assert logs["eof"] is True
    assert frames, logs
    for frame in frames:
        assert {"cursor", "channel", "data", "timestamp"} <= set(frame)
    cursors = [f["cursor"] for f in frames]
    assert cursors == list(range(cursors[0], cursors[0] + len(cursors)))
    assert logs["next_cursor"] == cursors[-1] + 1
    stdout = "".join(f["data"] for f in frames if f["channel"] == "stdout")
    stderr = "".join(f["data"] for f in frames if f["channel"] == "stderr")
    assert stdout == "".join("line %d\n" % i for i in range(5))
    assert stderr == "".join("err%d\n" % i for i in range(5))
    # A page of one from the second frame on.
    page = daemon.ok("GET", "/processes/%s/logs?cursor=%d&limit=1" % (pid, cursors[1]))
    assert page["frames"] == [frames[1]]
    assert page["next_cursor"] == cursors[1] + 1
    # From the end: nothing more.
    tail = daemon.ok("GET", "/processes/%s/logs?cursor=%d" % (pid, logs["next_cursor"]))
    assert tail["frames"] == [] and tail["eof"] is True


def test_logs_follow_of_finished_run(daemon):
    pid = daemon.run("print('a'); print('b')")["process"]["process_id"]
    stream = daemon.stream("GET", "/processes/%s/logs?follow=true" % pid)
    try:
        assert stream.status == 200
        events = list(stream.events())
    finally:
        stream.close()
    assert [e.event for e in events][-1] == "eof"
    logs = [e for e in events if e.event == "log"]
    assert "".join(e.data["data"] for e in logs) == "a\nb\n"
    assert all(e.id == str(e.data["cursor"]) for e in logs)
    assert events[-1].data["cursor"] == logs[-1].data["cursor"] + 1
    # Resume after the first frame with Last-Event-ID.
    stream = daemon.stream("GET", "/processes/%s/logs?follow=true" % pid,
                           headers={"Last-Event-ID": logs[0].id})
    try:
        resumed = [e for e in stream.events() if e.event == "log"]
    finally:
        stream.close()
    assert [e.data for e in resumed] == [e.data for e in logs[1:]]


def test_client_disconnect_mid_run_run_goes_on(daemon):
    code = ("import time\n"
            "for i in range(8):\n"
            "    print('tick', i, flush=True)\n"
            "    time.sleep(0.25)\n"
            "'done'\n")
    stream, events, pid = start_run(daemon, code)
    first = next(events)
    assert first.event == "stdout"
    stream.close()  # the client goes away mid-run
    # Anyone can follow it to the end.
    follow = daemon.stream("GET", "/processes/%s/logs?follow=true&cursor=0" % pid)
    try:
        followed = list(follow.events())
    finally:
        follow.close()
    assert followed[-1].event == "eof"
    text = "".join(e.data["data"] for e in followed if e.event == "log")
    assert text == "".join("tick %d\n" % i for i in range(8))
    waited = daemon.ok("GET", "/processes/%s/wait?timeout=30" % pid)
    assert waited["state"] == "terminal" and waited["exit_code"] == 0
    result = daemon.ok("GET", "/processes/%s/result" % pid)
    assert result["results"][0]["text"] == "'done'"
    assert daemon.ok("GET", "/health")["status"] == "ok"


def test_client_disconnect_then_signal(daemon):
    cid = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
    daemon.run("survivor = 1", context_id=cid)
    code = "import time\nprint('waiting', flush=True)\ntime.sleep(120)\n"
    stream, events, pid = start_run(daemon, code, context_id=cid)
    assert next(events).event == "stdout"
    stream.close()
    follow = daemon.stream("GET", "/processes/%s/logs?follow=true" % pid)
    got = {}

    def read():
        got["events"] = list(follow.events())

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    assert daemon.ok("GET", "/processes/%s" % pid)["state"] == "running"
    r = daemon.post("/processes/%s/signals" % pid, {"signal": "SIGINT"})
    assert r.status == 202, r
    waited = daemon.ok("GET", "/processes/%s/wait?timeout=30" % pid)
    assert waited["state"] == "terminal"
    assert waited["reason"] == "signaled" and waited["signal"] == "SIGINT"
    reader.join(30)
    follow.close()
    assert not reader.is_alive()
    assert got["events"][-1].event == "eof"
    result = daemon.ok("GET", "/processes/%s/result" % pid)
    assert result["error"]["name"] == "KeyboardInterrupt"
    # SIGINT interrupts; the context lives on with its state.
    assert daemon.run("survivor", context_id=cid)["results"][0]["text"] == "1"
    # Signalling a finished process is a no-op.
    r = daemon.post("/processes/%s/signals" % pid, {"signal": "SIGKILL"})
    assert r.status == 202
    assert daemon.run("survivor", context_id=cid)["results"][0]["text"] == "1"


def test_wait_with_huge_timeout_waits(daemon):
    stream, events, pid = start_run(daemon, "import time; time.sleep(1)")
    try:
        waited = daemon.ok("GET", "/processes/%s/wait?timeout=1e300" % pid)
        assert waited["state"] == "terminal", waited
        assert waited["reason"] == "exited"
        list(events)
    finally:
        stream.close()
