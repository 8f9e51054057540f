"""POST /run as JSON and as Server-Sent Events: the InterpreterResult, event
order and timing, timeouts, isolated runs, per-run cwd/env, big output."""

import json
import time

from conftest import error_of, pid_alive, wait_until


def test_run_json_result(shared_daemon):
    result = shared_daemon.run("1 + 1")
    process = result["process"]
    assert process["process_id"].startswith("prc_")
    assert process["exit_code"] == 0
    assert process["signal"] is None
    assert process["reason"] == "exited"
    assert result["error"] is None
    assert result["results"][0]["text"] == "2"
    assert result["results"][0]["is_main_result"] is True
    assert result["results"][0]["data"]["text/plain"] == "2"
    assert result["logs"] == {"stdout": "", "stderr": ""}
    assert isinstance(result["execution_count"], int)
    assert result["context"]["context_id"] == "default-python"
    assert result["context"]["language"] == "python"
    assert result["context"]["sandbox_id"] == shared_daemon.ok("GET", "/health")["sandbox_id"]


def test_run_error_result(shared_daemon):
    result = shared_daemon.run("print('before'); 1/0")
    assert result["process"]["exit_code"] == 1
    assert result["process"]["reason"] == "exited"
    assert result["error"]["name"] == "ZeroDivisionError"
    assert isinstance(result["error"]["traceback"], list) and result["error"]["traceback"]
    assert result["logs"]["stdout"] == "before\n"


def test_strip_ansi(shared_daemon):
    plain = shared_daemon.run("1/0", strip_ansi=True)["error"]["traceback"]
    assert not any("\x1b[" in line for line in plain), plain
    coloured = shared_daemon.run("1/0")["error"]["traceback"]
    assert any("\x1b[" in line for line in coloured), coloured


def test_state_persists_on_default_context(shared_daemon):
    shared_daemon.run("persisted_value = 41")
    assert shared_daemon.run("persisted_value + 1")["results"][0]["text"] == "42"


def test_kept_alive_connection(shared_daemon):
    conn = shared_daemon.connect()
    try:
        conn.connect()
        sock = conn.sock
        body = json.dumps({"code": "1 + 1"}).encode()
        for _ in range(100):
            conn.request("POST", "/run", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200
            assert json.loads(r.read())["results"][0]["text"] == "2"
        assert conn.sock is sock, "the connection was kept alive across requests"
    finally:
        conn.close()


def test_sse_order_and_first_stdout_while_running(shared_daemon):
    code = (
        "import sys, time\n"
        "print('first', flush=True)\n"
        "time.sleep(1.5)\n"
        "print('second')\n"
        "42\n"
    )
    sent = time.monotonic()
    stream = shared_daemon.run_stream(code)
    try:
        assert stream.status == 200
        assert stream.response.getheader("Content-Type").startswith("text/event-stream")
        events = list(stream.events())
    finally:
        stream.close()
    names = [e.event for e in events]
    assert names[0] == "start", names
    assert names[-1] == "result", names
    assert names.count("result") == 1 and names.count("start") == 1
    # Only SPEC's event names (the engine's "input" event is not one).
    assert set(names) <= {"start", "stdout", "stderr", "display", "display_update",
                          "clear_output", "error", "system", "result"}, names
    start = events[0].data
    result = events[-1].data
    assert start["process_id"] == result["process"]["process_id"]
    assert start["context"]["context_id"] == "default-python"
    stdout = [e for e in events if e.event == "stdout"]
    assert "".join(e.data["text"] for e in stdout) == "first\nsecond\n"
    assert stdout[0].data["text"].startswith("first")
    # The first line arrives while the run still sleeps.
    assert stdout[0].arrived - sent < events[-1].arrived - sent - 1.0, (
        stdout[0].arrived - sent, events[-1].arrived - sent)
    assert result["results"][0]["text"] == "42"
    assert result["logs"]["stdout"] == "first\nsecond\n"
    # Every results entry was streamed once, as a display event.
    displays = [e.data for e in events if e.event == "display"]
    assert displays == result["results"], (displays, result["results"])


def test_sse_stderr_display_and_error_events(shared_daemon):
    code = (
        "import sys\n"
        "from IPython.display import display, HTML\n"
        "sys.stderr.write('warn\\n'); sys.stderr.flush()\n"
        "display(HTML('<b>x</b>'), display_id='d1')\n"
        "raise ValueError('boom')\n"
    )
    stream = shared_daemon.run_stream(code)
    try:
        events = list(stream.events())
    finally:
        stream.close()
    names = [e.event for e in events]
    assert names[0] == "start" and names[-1] == "result", names
    assert "stderr" in names and "display" in names and "error" in names, names
    display = next(e.data for e in events if e.event == "display")
    assert display["html"] == "<b>x</b>" and display.get("display_id") == "d1", display
    error = next(e.data for e in events if e.event == "error")
    assert error["name"] == "ValueError" and error["value"] == "boom"
    assert names.index("stderr") < names.index("display") < names.index("error")
    assert events[-1].data["error"]["name"] == "ValueError"


def test_sse_keepalive_comment_on_idle_stream(daemon_factory):
    d = daemon_factory("--sse-keepalive", "0.3")
    stream = d.run_stream("import time; time.sleep(1.5)")
    try:
        items = list(stream.events(include_comments=True))
    finally:
        stream.close()
    comments = [i for i in items if i.event is None]
    assert len(comments) >= 2, items
    assert items[0].event == "start" and items[-1].event == "result"


def test_errors_before_run_are_json_when_sse_asked(shared_daemon):
    sse = {"Accept": "text/event-stream"}
    r = shared_daemon.post("/run", {"code": "1", "context_id": "no-such-ctx"}, headers=sse)
    error_of(r, 404, "SESSION_NOT_FOUND")
    r = shared_daemon.post("/run", {"code": "1", "language": "klingon"}, headers=sse)
    body = error_of(r, 404, "LANGUAGE_NOT_SUPPORTED")
    assert "python3" in body["message"], body  # lists the installed kernelspecs
    r = shared_daemon.post("/run", {"code": "1", "kernel_name": "no-such-spec"}, headers=sse)
    error_of(r, 404, "LANGUAGE_NOT_SUPPORTED")


def test_timeout_interrupts_and_keeps_state(daemon):
    ctx = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
    daemon.run("kept = 41", context_id=ctx)
    started = time.monotonic()
    result = daemon.run("import time; time.sleep(30)", context_id=ctx, timeout=1)
    elapsed = time.monotonic() - started
    assert elapsed < 10, elapsed
    assert result["process"]["reason"] == "timed_out"
    assert result["process"]["signal"] == "SIGINT"
    assert result["process"]["exit_code"] is None
    assert result["error"]["name"] == "TimeoutError"
    # Interrupted, not killed: the context and its state are still there.
    assert daemon.run("kept + 1", context_id=ctx)["results"][0]["text"] == "42"


def test_default_timeout_flag(daemon_factory):
    d = daemon_factory("--default-timeout", "1")
    result = d.run("import time; time.sleep(30)")
    assert result["process"]["reason"] == "timed_out"
    assert result["error"]["name"] == "TimeoutError"


def test_isolated_run_uses_a_fresh_kernel(daemon):
    daemon.run("iso_probe = 1")
    default_pid = daemon.ok("GET", "/contexts/default-python")["pid"]
    result = daemon.run("import os\nprint(os.getpid())\nprint('iso_probe' in globals())",
                        isolated=True)
    lines = result["logs"]["stdout"].split()
    iso_pid = int(lines[0])
    assert iso_pid != default_pid
    assert lines[1] == "False"
    assert result["process"]["exit_code"] == 0
    # The fresh kernel is gone afterwards, and no context stays behind.
    assert wait_until(lambda: not pid_alive(iso_pid), 15), iso_pid
    ids = [c["context_id"] for c in daemon.ok("GET", "/contexts?all=true")["contexts"]]
    assert ids == ["default-python"], ids


def test_isolated_run_cwd_and_env(daemon, tmp_path):
    result = daemon.run("import os; print(os.getcwd()); print(os.environ.get('ISO_VAR'))",
                        isolated=True, cwd=str(tmp_path), env={"ISO_VAR": "iso"})
    assert result["logs"]["stdout"].split() == [str(tmp_path), "iso"]


def test_per_run_cwd_and_env_are_restored(daemon, tmp_path):
    ctx = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
    probe = "import os; print(os.getcwd()); print(os.environ.get('RUN_VAR', '-'))"
    before = daemon.run(probe, context_id=ctx)["logs"]["stdout"].split()
    during = daemon.run(probe, context_id=ctx, cwd=str(tmp_path),
                        env={"RUN_VAR": "set"})["logs"]["stdout"].split()
    after = daemon.run(probe, context_id=ctx)["logs"]["stdout"].split()
    assert during == [str(tmp_path), "set"]
    assert before[1] == "-" and after == before


def test_big_output_20_mib(shared_daemon):
    size = 20 * 1024 * 1024
    code = "import sys\nfor _ in range(20):\n    sys.stdout.write('x' * (1024 * 1024))\n"
    result = shared_daemon.run(code)
    assert len(result["logs"]["stdout"]) == size
    assert result["logs"]["stdout"] == "x" * size
    assert result.get("truncated") is False
    # And as a stream: every byte in stdout events, then again in the result.
    stream = shared_daemon.run_stream(code)
    try:
        total, last = 0, None
        for event in stream.events():
            if event.event == "stdout":
                total += len(event.data["text"])
            last = event
    finally:
        stream.close()
    assert total == size
    assert last.event == "result" and len(last.data["logs"]["stdout"]) == size
    assert shared_daemon.ok("GET", "/health")["status"] == "ok"


def test_max_output_truncates(daemon_factory):
    d = daemon_factory("--max-output", "1M")
    code = "import sys\nfor _ in range(3):\n    sys.stdout.write('y' * (1024 * 1024))\nprint('after')"
    result = d.run(code)
    assert result["truncated"] is True
    assert len(result["logs"]["stdout"]) <= 1024 * 1024
    assert result["process"]["exit_code"] == 0
    # The record's logs say why with a system frame.
    logs = d.ok("GET", "/processes/%s/logs" % result["process"]["process_id"])
    assert any(f["channel"] == "system" for f in logs["frames"]), logs["frames"][-3:]
    # Small runs are untouched.
    assert d.run("print('ok')")["truncated"] is False


def test_code_with_env_of_kernel_has_no_kb_secrets(daemon_factory):
    d = daemon_factory(env={"KB_SECRET_THING": "leak"})
    out = d.run("import os; print(os.environ.get('KB_SECRET_THING'))")
    assert out["logs"]["stdout"].strip() == "None"


def test_workdir_of_daemon_is_default_cwd(daemon_factory, tmp_path):
    d = daemon_factory(workdir=str(tmp_path))
    assert d.run("import os; print(os.getcwd())")["logs"]["stdout"].strip() == str(tmp_path)


def test_streams_outlive_the_connection_timeout(daemon_factory):
    """An idle stream is kept open by comments even when the idle-connection
    timeout is shorter than the run (and than the asked keep-alive)."""
    d = daemon_factory("--connection-timeout", "1", "--sse-keepalive", "10")
    stream = d.run_stream("import time; print('a', flush=True); time.sleep(2.5); 'late'")
    try:
        events = stream.events()
        pid = next(events).data["process_id"]
        follow = d.stream("GET", "/processes/%s/logs?follow=true" % pid)
        try:
            followed = list(follow.events())
        finally:
            follow.close()
        rest = list(events)
    finally:
        stream.close()
    assert rest[-1].event == "result", rest
    assert rest[-1].data["results"][0]["text"] == "'late'"
    assert followed[-1].event == "eof", followed
    assert [e.data["data"] for e in followed if e.event == "log"] == ["a\n"]


def test_huge_timeout_is_a_budget_not_an_overflow(shared_daemon):
    for timeout in (1e6, 1e12, 1e300):
        result = shared_daemon.run("1 + 1", timeout=timeout)
        assert result["process"]["reason"] == "exited", (timeout, result["process"])
        assert result["results"][0]["text"] == "2"


def test_sse_display_update_and_clear_output(shared_daemon):
    code = (
        "from IPython.display import display, clear_output, JSON\n"
        "print('gone', flush=True)\n"
        "clear_output()\n"
        "h = display('first', display_id='upd')\n"
        "h.update('second')\n"
        "display(JSON({'k': [1, 2]}))\n"
    )
    stream = shared_daemon.run_stream(code)
    try:
        events = list(stream.events())
    finally:
        stream.close()
    names = [e.event for e in events]
    assert names[0] == "start" and names[-1] == "result", names
    for name in ("stdout", "clear_output", "display", "display_update"):
        assert name in names, names
    assert names.index("stdout") < names.index("clear_output") < names.index("display") \
        < names.index("display_update")
    assert next(e for e in events if e.event == "clear_output").data["wait"] is False
    update = next(e for e in events if e.event == "display_update").data
    assert update["display_id"] == "upd" and update["data"]["text/plain"] == "'second'"
    result = events[-1].data
    assert result["logs"]["stdout"] == ""  # cleared
    assert [r["text"] for r in result["results"]][0] == "'second'"
    assert result["results"][0]["display_id"] == "upd"
    assert result["results"][1]["json"] == {"k": [1, 2]}
