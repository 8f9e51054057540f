"""The daemon itself: start-up, flags and their KB_* equivalents, the request
log, /health, /kernelspecs, routing (404 / 405)."""

import http.client
import json
import os
import re
import subprocess

from conftest import BINARY, Daemon, error_of, wait_until


def test_health_fields(shared_daemon):
    r = shared_daemon.get("/health")
    assert r.status == 200
    assert r.header("Content-Type").startswith("application/json")
    body = r.json
    assert body["status"] == "ok"
    assert isinstance(body["version"], str) and body["version"]
    assert isinstance(body["sandbox_id"], str) and body["sandbox_id"]
    assert isinstance(body["contexts"], int) and body["contexts"] >= 0
    assert isinstance(body["uptime_s"], (int, float)) and body["uptime_s"] >= 0


def test_listening_line_and_port_file(shared_daemon):
    assert "listening on http://127.0.0.1:%d" % shared_daemon.port in shared_daemon.stdout


def test_kernelspecs_lists_ipykernel(shared_daemon):
    specs = shared_daemon.ok("GET", "/kernelspecs")["kernelspecs"]
    by_name = {s["name"]: s for s in specs}
    assert "python3" in by_name, specs
    python3 = by_name["python3"]
    assert python3["language"].lower() == "python"
    for key in ("display_name", "interrupt_mode", "resource_dir"):
        assert key in python3, python3


def test_unknown_route_is_404(shared_daemon):
    # "/" is the web console (SPEC section 11; tests/integration/test_console.py)
    for path in ("/nope", "/contexts/a/b/c", "/run/x", "/processes/p/nope", "/consoles",
                 "/health/"):
        body = error_of(shared_daemon.get(path), 404, "NOT_FOUND")
        assert body["path"] == path
        assert body["method"] == "GET"


def test_wrong_method_is_405_with_allow(shared_daemon):
    cases = [
        ("PUT", "/run", "POST"),
        ("GET", "/run", "POST"),
        ("DELETE", "/contexts", "GET, POST"),
        ("POST", "/processes/prc_x", "GET, DELETE"),
        ("GET", "/processes/prc_x/signals", "POST"),
        ("POST", "/health", "GET"),
    ]
    for method, path, allow in cases:
        r = shared_daemon.request(method, path)
        error_of(r, 405, "METHOD_NOT_ALLOWED")
        assert r.header("Allow") == allow, (method, path, r.headers)


def test_error_body_shape(shared_daemon):
    r = shared_daemon.get("/contexts/does-not-exist")
    body = error_of(r, 404, "SESSION_NOT_FOUND")
    assert set(body) >= {"code", "message", "status_code", "path", "method", "timestamp"}
    assert body["path"] == "/contexts/does-not-exist"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", body["timestamp"]), body


def test_request_log_line_per_request(daemon):
    daemon.get("/health")
    daemon.get("/nope")
    # The line is written once the response is out: wait for it briefly.
    assert wait_until(lambda: re.search(r"GET /nope 404 [0-9.]+ms", daemon.log), 5), daemon.log
    assert re.search(r"GET /health 200 [0-9.]+ms", daemon.log), daemon.log


def test_json_log_format(daemon_factory):
    d = daemon_factory("--log-format", "json")
    d.get("/health")
    assert wait_until(lambda: '"/health"' in d.log, 5), d.log
    records = [json.loads(line) for line in d.log.splitlines() if line.strip()]
    requests = [r for r in records if r.get("path") == "/health"]
    assert requests, records
    record = requests[0]
    assert record["method"] == "GET" and record["status"] == 200
    assert isinstance(record["duration_ms"], (int, float)) and record["duration_ms"] >= 0


def test_help_and_bad_flags():
    out = subprocess.run([BINARY, "serve", "--help"], capture_output=True, timeout=30)
    assert out.returncode == 0
    text = out.stdout.decode()
    for flag in ("--listen", "--token-file", "--state-dir", "--sandbox-id", "--kernel",
                 "--preload", "--default-timeout", "--max-contexts", "--max-body",
                 "--max-output", "--log-format", "--insecure"):
        assert flag in text, flag
    for bad in (["--no-such-flag"], ["--listen", "nonsense"], ["--log-format", "xml"],
                ["--max-body", "12Q"], ["--default-timeout", "-1"], ["--kernel", "python"]):
        out = subprocess.run([BINARY, "serve", *bad], capture_output=True, timeout=30)
        assert out.returncode == 2, (bad, out)
        assert out.stderr, bad


def test_environment_equivalents(tmp_path):
    """KB_LISTEN, KB_PORT_FILE, KB_STATE_DIR, KB_SANDBOX_ID, KB_LOG_FORMAT."""
    port_file = tmp_path / "port"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env.update(KB_LISTEN="127.0.0.1:0", KB_PORT_FILE=str(port_file),
               KB_STATE_DIR=str(tmp_path / "s"), KB_SANDBOX_ID="sb_from_env",
               KB_LOG_FORMAT="json")
    err = open(tmp_path / "err", "wb")
    proc = subprocess.Popen([BINARY, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        assert wait_until(port_file.exists, 30), (tmp_path / "err").read_text()
        conn = http.client.HTTPConnection("127.0.0.1", int(port_file.read_text()), timeout=30)
        conn.request("GET", "/health")
        health = json.loads(conn.getresponse().read())
        assert health["sandbox_id"] == "sb_from_env"
        conn.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        err.close()
    assert not port_file.exists(), "the port file is removed at exit"
    lines = (tmp_path / "err").read_text().splitlines()
    assert lines and all(json.loads(line) for line in lines), lines


def test_sandbox_id_flag_and_kept_in_state_dir(tmp_path):
    d = Daemon(["--sandbox-id", "sb_flag"])
    try:
        assert d.ok("GET", "/health")["sandbox_id"] == "sb_flag"
    finally:
        d.close()


def test_preload_starts_default_context_without_a_record(daemon_factory):
    d = daemon_factory("--preload", "python")
    contexts = d.ok("GET", "/contexts?all=true")["contexts"]
    ids = [c["context_id"] for c in contexts]
    assert "default-python" in ids, contexts
    assert d.ok("GET", "/processes")["processes"] == []
    # The preloaded kernel is the one runs use: no second start.
    pid = next(c["pid"] for c in contexts if c["context_id"] == "default-python")
    d.run("1")
    again = d.ok("GET", "/contexts/default-python")
    assert again["pid"] == pid
