"""The E2B code-interpreter API (`--e2b-listen`): the routes E2B's SDKs call,
served by the real daemon on a second loopback listener, on real kernels.

POST /execute answers application/json with one JSON object per line; the
tests read the lines as they arrive (http.client, standard library only).
"""

import http.client
import json
import signal
import socket
import threading
import time

import pytest

from conftest import HTTP_TIMEOUT, START_TIMEOUT, Daemon, wait_until
from kernels_testlib import KERNEL_ARGS, kernel_env, require_deno


class E2b:
    """The E2B listener of one daemon."""

    def __init__(self, daemon):
        self.daemon = daemon
        port_file = daemon.dir / "e2b-port"
        assert wait_until(port_file.exists, START_TIMEOUT), daemon.log
        self.port = int(port_file.read_text().strip())

    def connect(self, timeout=HTTP_TIMEOUT):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = self.connect()
        try:
            h = {"Content-Type": "application/json"}
            if self.daemon.token:
                h["X-Access-Token"] = self.daemon.token
            h.update(headers or {})
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            conn.request(method, path, data, h)
            r = conn.getresponse()
            return r.status, r.getheader("Content-Type") or "", r.read()
        finally:
            conn.close()

    def ok(self, method, path, body=None):
        status, _, data = self.request(method, path, body)
        assert status == 200, (method, path, status, data)
        return json.loads(data)

    def open_execute(self, body, timeout=HTTP_TIMEOUT):
        """Start POST /execute; returns (conn, response) to read lines from."""
        conn = self.connect(timeout)
        h = {"Content-Type": "application/json"}
        if self.daemon.token:
            h["X-Access-Token"] = self.daemon.token
        conn.request("POST", "/execute", json.dumps(body).encode(), h)
        r = conn.getresponse()
        return conn, r

    def execute(self, code, timed=False, **fields):
        """The lines of one execution, each as (arrival time, object)."""
        conn, r = self.open_execute(dict(code=code, **fields))
        try:
            assert r.status == 200, (r.status, r.read())
            assert r.getheader("Content-Type").startswith("application/json")
            lines = []
            while True:
                line = r.readline()
                if not line:
                    break
                assert line.endswith(b"\n"), line
                lines.append((time.monotonic(), json.loads(line)))
        finally:
            conn.close()
        return lines if timed else [obj for _, obj in lines]


def plain_error(status, content_type, body, expected):
    assert status == expected, (status, body)
    assert content_type.startswith("text/plain"), content_type
    assert body.strip(), body
    return body.decode()


def types(lines):
    return [line["type"] for line in lines if line["type"] != "keepalive"]


def start(daemon_factory, *args, **kw):
    d = daemon_factory(
        "--e2b-listen", "127.0.0.1:0", "--e2b-port-file", "e2b-port", *args, **kw
    )
    return d, E2b(d)


@pytest.fixture(scope="module")
def shared():
    d = Daemon(["--e2b-listen", "127.0.0.1:0", "--e2b-port-file", "e2b-port"])
    yield E2b(d)
    d.close()


# ---- health, auth, listener -------------------------------------------------


def test_health_is_open_and_the_token_is_taken_from_either_header(daemon_factory):
    d, e2b = start(daemon_factory, token="s3cret")
    conn = e2b.connect()
    conn.request("GET", "/health")
    r = conn.getresponse()
    assert (r.status, json.loads(r.read())) == (200, "OK")
    conn.close()
    status, ctype, body = e2b.request("GET", "/contexts", headers={"X-Access-Token": "wrong"})
    plain_error(status, ctype, body, 401)
    status, _, _ = e2b.request("GET", "/contexts", headers={"X-Access-Token": "s3cret"})
    assert status == 200
    status, _, _ = e2b.request(
        "GET", "/contexts", headers={"X-Access-Token": "", "Authorization": "Bearer s3cret"}
    )
    assert status == 200
    # The native API keeps its own rule: Bearer only.
    assert d.get("/contexts", token="", headers={"X-Access-Token": "s3cret"}).status == 401
    assert d.get("/contexts").status == 200


def test_the_listener_is_off_unless_asked(daemon):
    assert not (daemon.dir / "e2b-port").exists()
    assert daemon.get("/health").status == 200


# ---- contexts ---------------------------------------------------------------


def test_contexts_create_list_restart_delete(daemon_factory, tmp_path):
    d, e2b = start(daemon_factory)
    listed = e2b.ok("GET", "/contexts")
    ids = [c["id"] for c in listed]
    assert "default-python" in ids and "default" not in ids
    for c in listed:
        assert set(c) == {"id", "language", "cwd"}

    ctx = e2b.ok("POST", "/contexts", {"language": "python", "cwd": str(tmp_path)})
    assert ctx["language"] == "python" and ctx["cwd"] == str(tmp_path)
    assert any(c["id"] == ctx["id"] for c in e2b.ok("GET", "/contexts"))
    # The same context is the native API's too.
    assert d.ok("GET", "/contexts/" + ctx["id"])["cwd"] == str(tmp_path)

    lines = e2b.execute("import os; x = 41; os.getcwd()", context_id=ctx["id"])
    assert [l.get("text") for l in lines if l["type"] == "result"] == [str(tmp_path)]
    lines = e2b.execute("x + 1", context_id=ctx["id"])
    assert [l.get("text") for l in lines if l["type"] == "result"] == ["42"]

    assert e2b.ok("POST", "/contexts/%s/restart" % ctx["id"]) is None
    lines = e2b.execute("x", context_id=ctx["id"])
    assert [l["name"] for l in lines if l["type"] == "error"] == ["NameError"]

    assert e2b.ok("DELETE", "/contexts/" + ctx["id"]) is None
    assert all(c["id"] != ctx["id"] for c in e2b.ok("GET", "/contexts"))
    for method, path in (
        ("DELETE", "/contexts/" + ctx["id"]),
        ("POST", "/contexts/%s/restart" % ctx["id"]),
        ("DELETE", "/contexts/no-such-context"),
        ("POST", "/contexts/no%20such/restart"),
    ):
        status, ctype, body = e2b.request(method, path)
        plain_error(status, ctype, body, 404)
    status, ctype, body = e2b.request("POST", "/execute", {"code": "1", "context_id": ctx["id"]})
    plain_error(status, ctype, body, 404)


def test_default_names_the_python_default_context(shared):
    shared.execute("shared_marker = 'alias'")
    for fields in ({"context_id": "default"}, {"language": "python"}, {"context_id": "default-python"}):
        lines = shared.execute("shared_marker", **fields)
        assert [l.get("text") for l in lines if l["type"] == "result"] == ["alias"], fields


def test_javascript_runs_on_its_default_context_under_every_name(daemon_factory):
    # Deno's kernelspec (scripts/setup.sh) on JUPYTER_PATH: the default
    # JavaScript context exists from start-up, and js, ts, javascript and
    # typescript all name it.
    require_deno()
    d, e2b = start(daemon_factory, *KERNEL_ARGS, env=kernel_env())
    listed = {c["id"]: c["language"] for c in e2b.ok("GET", "/contexts")}
    assert listed.get("default-javascript") == "javascript", listed
    pid = d.ok("GET", "/contexts/default-javascript")["pid"]
    lines = e2b.execute("let counter = 40; console.log('from deno'); counter + 1",
                        language="js")
    assert types(lines) == ["number_of_executions", "stdout", "result", "end_of_execution"], lines
    assert lines[1]["text"] == "from deno\n"
    assert lines[2]["text"] == "41" and lines[2]["is_main_result"] is True
    for expected, language in ((41, "ts"), (42, "TypeScript"), (43, "javascript")):
        lines = e2b.execute("counter += 1; const n: number = counter; n", language=language)
        assert [l.get("text") for l in lines if l["type"] == "result"] == [str(expected)], (
            language, lines)
    lines = e2b.execute("throw new TypeError('bad')", language="js")
    errors = [l for l in lines if l["type"] == "error"]
    assert len(errors) == 1 and "bad" in errors[0]["value"], lines
    assert types(lines)[-1] == "end_of_execution"
    # One kernel served them all, and no other context was made.
    assert d.ok("GET", "/contexts/default-javascript")["pid"] == pid
    assert sorted(c["id"] for c in e2b.ok("GET", "/contexts")) == [
        "default-javascript", "default-python"]


def test_a_restart_of_default_gives_a_fresh_python_kernel(daemon_factory):
    _, e2b = start(daemon_factory)
    e2b.execute("gone = 1")
    assert e2b.ok("POST", "/contexts/default/restart") is None
    lines = e2b.execute("gone")
    assert [l["name"] for l in lines if l["type"] == "error"] == ["NameError"]


# ---- execute: each line type and their order --------------------------------


def test_stdout_stderr_results_in_order_and_end_last(shared):
    code = (
        "import sys\n"
        "from IPython.display import display, HTML\n"
        "print('out', flush=True)\n"
        "print('err', file=sys.stderr, flush=True)\n"
        "display(HTML('<b>hi</b>'))\n"
        "display({'application/json': {'a': [1, 2]}, 'application/x-custom': 'zz',"
        " 'text/plain': 'j'}, raw=True)\n"
        "'bar'"
    )
    lines = shared.execute(code)
    assert types(lines) == [
        "number_of_executions", "stdout", "stderr", "result", "result", "result", "end_of_execution",
    ], lines
    count, out, err, html, custom, main = lines[:6]
    assert out["text"] == "out\n" and err["text"] == "err\n"
    for line in (out, err):
        assert isinstance(line["timestamp"], str) and line["timestamp"][:2] == "20"
    assert html["html"] == "<b>hi</b>" and html["is_main_result"] is False
    assert "png" not in html and "extra" not in html
    assert custom["json"] == {"a": [1, 2]} and custom["text"] == "j"
    assert custom["extra"] == {"application/x-custom": "zz"}
    assert main == {"type": "result", "is_main_result": True, "text": "bar"}
    assert isinstance(count["execution_count"], int) and count["execution_count"] >= 1
    assert lines[-1] == {"type": "end_of_execution"}


def test_the_execution_count_comes_when_the_kernel_echoes_the_input(shared):
    lines = shared.execute(
        "import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b', flush=True)", timed=True
    )
    arrived = {obj["type"]: t for t, obj in reversed(lines)}  # first of each type
    assert types([obj for _, obj in lines]) == [
        "number_of_executions", "stdout", "stdout", "end_of_execution"
    ], lines
    # Sent before the code ran, not held back until its end.
    assert lines[-1][0] - arrived["number_of_executions"] > 1.0, lines
    before = lines[0][1]["execution_count"]
    after = shared.execute("1")
    assert after[0] == {"type": "number_of_executions", "execution_count": before + 1}, after


def test_a_kernel_that_echoes_no_input_still_gives_the_count(daemon_factory):
    # kb-no-execute-input (kernelspecs/) sends no execute_input: the count
    # of its execute_reply goes out before end_of_execution instead.
    d, e2b = start(daemon_factory, *KERNEL_ARGS, env=kernel_env())
    ctx = d.ok("POST", "/contexts", {"kernel_name": "kb-no-execute-input"}, status=201)
    lines = e2b.execute("print('hi')\n6 * 7", context_id=ctx["context_id"])
    assert types(lines) == ["stdout", "result", "number_of_executions", "end_of_execution"], lines
    assert lines[1]["text"] == "42"
    assert lines[2]["execution_count"] == d.ok(
        "GET", "/contexts/%s" % ctx["context_id"])["execution_count"]


def test_a_matplotlib_figure_is_a_png_result(shared):
    lines = shared.execute(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    )
    pngs = [l["png"] for l in lines if l["type"] == "result" and "png" in l]
    assert len(pngs) == 1 and pngs[0].startswith("iVBOR"), lines


def test_lines_arrive_as_they_happen(shared):
    lines = shared.execute(
        "import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b', flush=True)", timed=True
    )
    stamps = {obj["text"].strip(): t for t, obj in lines if obj["type"] == "stdout"}
    assert stamps["b"] - stamps["a"] > 1.0, lines


def test_an_error_comes_once_with_its_traceback_joined(shared):
    lines = shared.execute("print('before')\n1/0")
    assert types(lines) == ["number_of_executions", "stdout", "error", "end_of_execution"], lines
    error = lines[2]
    assert error["name"] == "ZeroDivisionError" and error["value"] == "division by zero"
    assert isinstance(error["traceback"], str) and "ZeroDivisionError" in error["traceback"]
    # The context goes on.
    assert types(shared.execute("1")) == ["number_of_executions", "result", "end_of_execution"]


def test_keepalive_after_five_quiet_seconds(shared):
    lines = shared.execute("import time; time.sleep(6.5); print('done')", timed=True)
    kinds = [obj["type"] for _, obj in lines]
    assert kinds.count("keepalive") >= 1, kinds
    assert kinds.index("keepalive") < kinds.index("stdout")
    assert kinds[-1] == "end_of_execution"


def test_env_vars_apply_to_one_execution_and_are_restored(shared):
    shared.execute("import os; os.environ['E2B_TEST_KEPT'] = 'before'")
    lines = shared.execute(
        "import os; (os.environ.get('E2B_TEST_NEW'), os.environ['E2B_TEST_KEPT'])",
        env_vars={"E2B_TEST_NEW": "v1", "E2B_TEST_KEPT": "during"},
    )
    assert [l.get("text") for l in lines if l["type"] == "result"] == ["('v1', 'during')"], lines
    lines = shared.execute("import os; (os.environ.get('E2B_TEST_NEW'), os.environ['E2B_TEST_KEPT'])")
    assert [l.get("text") for l in lines if l["type"] == "result"] == ["(None, 'before')"], lines


def test_a_client_that_goes_away_interrupts_its_execution(daemon_factory):
    d, e2b = start(daemon_factory)
    ctx = e2b.ok("POST", "/contexts", {"language": "python"})
    conn, r = e2b.open_execute(
        {"code": "import time\nprint('started', flush=True)\ntime.sleep(60)\nfinished = True",
         "context_id": ctx["id"]}
    )
    assert r.status == 200
    assert json.loads(r.readline())["type"] == "number_of_executions"
    assert json.loads(r.readline())["type"] == "stdout"
    gone = time.monotonic()
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()

    def ended():
        procs = d.ok("GET", "/processes?context_id=" + ctx["id"])["processes"]
        return procs and all(p["state"] == "terminal" for p in procs)

    assert wait_until(ended, 15), d.log
    assert time.monotonic() - gone < 15
    proc = d.ok("GET", "/processes?context_id=" + ctx["id"])["processes"][0]
    assert proc["reason"] == "signaled" and proc["signal"] == "SIGINT", proc
    lines = e2b.execute("'finished' in globals()", context_id=ctx["id"])
    assert [l.get("text") for l in lines if l["type"] == "result"] == ["False"]


def test_executions_on_different_contexts_run_in_parallel(daemon_factory):
    _, e2b = start(daemon_factory)
    ids = [e2b.ok("POST", "/contexts", {"language": "python"})["id"] for _ in range(3)]
    results = {}

    def run(cid):
        results[cid] = e2b.execute("import time; time.sleep(2); %r" % cid, context_id=cid)

    began = time.monotonic()
    threads = [threading.Thread(target=run, args=(cid,)) for cid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HTTP_TIMEOUT)
    elapsed = time.monotonic() - began
    assert elapsed < 5.0, elapsed
    for cid in ids:
        lines = results[cid]
        assert [l.get("text") for l in lines if l["type"] == "result"] == [cid]
        assert lines[-1] == {"type": "end_of_execution"}


def test_a_kernel_that_dies_ends_the_stream_with_an_error(daemon_factory):
    _, e2b = start(daemon_factory)
    ctx = e2b.ok("POST", "/contexts", {"language": "python"})
    lines = e2b.execute(
        "import os, signal\nprint('dying', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)",
        context_id=ctx["id"],
    )
    kinds = [k for k in types(lines) if k != "number_of_executions"]
    assert kinds[-2:] == ["error", "end_of_execution"], lines
    assert kinds.count("error") == 1
    assert [l["name"] for l in lines if l["type"] == "error"] == ["KernelDied"]
    status, ctype, body = e2b.request("POST", "/execute", {"code": "1", "context_id": ctx["id"]})
    plain_error(status, ctype, body, 404)
    # The default context is untouched.
    assert types(e2b.execute("1"))[-1] == "end_of_execution"


def test_a_daemon_stopping_ends_the_stream(daemon_factory):
    d, e2b = start(daemon_factory)
    conn, r = e2b.open_execute({"code": "import time\nprint('go', flush=True)\ntime.sleep(60)"})
    assert json.loads(r.readline())["type"] == "number_of_executions"
    assert json.loads(r.readline())["type"] == "stdout"
    d.signal(signal.SIGTERM)
    rest = []
    while True:
        line = r.readline()
        if not line:
            break
        rest.append(json.loads(line))
    conn.close()
    kinds = [k for k in types(rest) if k != "number_of_executions"]
    assert kinds == ["error", "end_of_execution"], rest
    assert rest[0]["name"] == "SandboxStopped"
    assert d.wait() == 0


# ---- bad input --------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"{\"code\": ", 400),
        (b"", 400),
        (b"[1, 2]", 400),
        (b"{}", 400),
        (b"{\"code\": 1}", 400),
        (b"{\"code\": \"1\", \"language\": 3}", 400),
        (b"{\"code\": \"1\", \"context_id\": true}", 400),
        (b"{\"code\": \"1\", \"env_vars\": [\"A\"]}", 400),
        (b"{\"code\": \"1\", \"env_vars\": {\"A\": 1}}", 400),
        (b"{\"code\": \"1\", \"env_vars\": {\"A=B\": \"x\"}}", 400),
        (b"{\"code\": \"1\", \"context_id\": \"default\", \"language\": \"python\"}", 400),
        (b"{\"code\": \"1\", \"language\": \"no-such-language\"}", 404),
        (b"{\"code\": \"a\\u0000b\"}", 400),
    ],
)
def test_bad_execute_requests_get_a_plain_4xx(shared, raw, expected):
    status, ctype, body = shared.request("POST", "/execute", raw=raw)
    plain_error(status, ctype, body, expected)
    assert shared.ok("GET", "/health") == "OK"


def test_bad_requests_elsewhere_get_a_plain_4xx_and_the_daemon_stays_healthy(shared):
    for method, path, raw, expected in (
        ("POST", "/contexts", b"not json", 400),
        ("POST", "/contexts", b"{\"language\": 5}", 400),
        ("POST", "/contexts", b"{\"cwd\": []}", 400),
        ("POST", "/contexts", b"{\"language\": \"no-such-language\"}", 404),
        ("GET", "/execute", None, 405),
        ("PUT", "/contexts", None, 405),
        ("GET", "/contexts/default", None, 405),
        ("GET", "/nothing-here", None, 404),
        ("POST", "/contexts/a/b", None, 404),
    ):
        status, ctype, body = shared.request(method, path, raw=raw)
        plain_error(status, ctype, body, expected)
    assert types(shared.execute("1 + 1")) == ["number_of_executions", "result", "end_of_execution"]
