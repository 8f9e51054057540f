"""Bad input always gets a typed 4xx and never wedges the daemon: malformed
JSON, wrong types, missing fields, invalid values, oversized bodies, odd
requests on the wire."""

import json

import pytest

from conftest import error_of, raw_http

BAD_RUN_BODIES = [
    # (body as sent, status, code)
    (b"", 400, "INVALID_REQUEST_BODY"),
    (b"{", 400, "INVALID_REQUEST_BODY"),
    (b"{'code': '1'}", 400, "INVALID_REQUEST_BODY"),
    (b'{"code": "1"} trailing', 400, "INVALID_REQUEST_BODY"),
    (b'{"code": "\xff\xfe"}', 400, "INVALID_REQUEST_BODY"),
    (b"[" * 5000 + b"]" * 5000, 400, "INVALID_REQUEST_BODY"),
    (b"[1, 2]", 400, "BAD_REQUEST"),
    (b'"1+1"', 400, "BAD_REQUEST"),
    (b"{}", 400, "BAD_REQUEST"),
    (b'{"language": "python"}', 400, "BAD_REQUEST"),
    (b'{"code": 1}', 400, "BAD_REQUEST"),
    (b'{"code": ["1"]}', 400, "BAD_REQUEST"),
    (b'{"code": "1\\u0000"}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "timeout": -1}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "timeout": "5"}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "timeout": true}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "isolated": "yes"}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "strip_ansi": 1}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "language": 3}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "cwd": 5}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "env": "A=1"}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "env": ["A"]}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "env": {"A": 1}}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "env": {"A": null}}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "env": {"A=B": "1"}}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "env": {"": "1"}}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "context_id": 7}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "context_id": "a/b"}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "context_id": "has space"}', 400, "BAD_REQUEST"),
    (b'{"code": "1", "context_id": ""}', 400, "BAD_REQUEST"),
    (('{"code": "1", "context_id": "%s"}' % ("x" * 65)).encode(), 400, "BAD_REQUEST"),
    (b'{"code": "1", "isolated": true, "context_id": "abc"}', 400, "BAD_REQUEST"),
]


@pytest.mark.parametrize("body,status,code", BAD_RUN_BODIES)
def test_bad_run_body(shared_daemon, body, status, code):
    r = shared_daemon.post("/run", body)
    error_of(r, status, code)


@pytest.mark.parametrize("body,status,code", BAD_RUN_BODIES[:8] + BAD_RUN_BODIES[-4:])
def test_bad_run_body_is_json_even_for_sse(shared_daemon, body, status, code):
    r = shared_daemon.post("/run", body, headers={"Accept": "text/event-stream"})
    error_of(r, status, code)


BAD_CONTEXT_BODIES = [
    (b"", 400, "INVALID_REQUEST_BODY"),
    (b"nope", 400, "INVALID_REQUEST_BODY"),
    (b"null", 400, "BAD_REQUEST"),
    (b"{}", 400, "BAD_REQUEST"),
    (b'{"language": 1}', 400, "BAD_REQUEST"),
    (b'{"kernel_name": false}', 400, "BAD_REQUEST"),
    (b'{"language": "python", "context_id": "bad id!"}', 400, "BAD_REQUEST"),
    (b'{"language": "python", "env": {"X": 2}}', 400, "BAD_REQUEST"),
    (b'{"language": "python", "cwd": {}}', 400, "BAD_REQUEST"),
]


@pytest.mark.parametrize("body,status,code", BAD_CONTEXT_BODIES)
def test_bad_context_body(shared_daemon, body, status, code):
    error_of(shared_daemon.post("/contexts", body), status, code)


def test_bad_signal_bodies(shared_daemon):
    # A real finished process, so the body is what is wrong.
    pid = shared_daemon.run("1")["process"]["process_id"]
    path = "/processes/%s/signals" % pid
    error_of(shared_daemon.post(path, b"{"), 400, "INVALID_REQUEST_BODY")
    error_of(shared_daemon.post(path, {}), 400, "BAD_REQUEST")
    error_of(shared_daemon.post(path, {"signal": 9}), 400, "BAD_REQUEST")
    error_of(shared_daemon.post(path, {"signal": "SIGHUP"}), 400, "BAD_REQUEST")
    error_of(shared_daemon.post("/processes/prc_nope/signals", {"signal": "SIGINT"}), 404,
             "PROCESS_NOT_FOUND")


@pytest.mark.parametrize("path", [
    "/contexts?all=maybe",
    "/processes?state=sleeping",
    "/processes/prc_x/logs?cursor=abc",
    "/processes/prc_x/logs?cursor=-1",
    "/processes/prc_x/logs?limit=1.5",
    "/processes/prc_x/logs?follow=yes",
    "/processes/prc_x/wait?timeout=soon",
    "/processes/prc_x/wait?timeout=-2",
    "/processes/prc_x/wait?timeout=nan",
])
def test_bad_query_parameters(shared_daemon, path):
    error_of(shared_daemon.get(path), 400, "BAD_REQUEST")


def test_unknown_fields_are_ignored(shared_daemon):
    result = shared_daemon.run("40 + 2", some_future_field={"x": 1})
    assert result["results"][0]["text"] == "42"


def test_null_optional_fields_are_absent(shared_daemon):
    result = shared_daemon.run("6 * 7", context_id=None, timeout=None, env=None, cwd=None)
    assert result["results"][0]["text"] == "42"


def test_oversized_body_declared(daemon_factory):
    d = daemon_factory("--max-body", "64K")
    body = json.dumps({"code": "x = '%s'" % ("a" * 70000)}).encode()
    error_of(d.post("/run", body), 413, "PAYLOAD_TOO_LARGE")
    # Just under the limit is fine.
    ok = json.dumps({"code": "len('%s')" % ("a" * 60000)}).encode()
    assert d.ok("POST", "/run", ok)["results"][0]["text"] == "60000"
    assert d.ok("GET", "/health")["status"] == "ok"


def test_oversized_body_chunked(daemon_factory):
    d = daemon_factory("--max-body", "64K")
    payload = json.dumps({"code": "'%s'" % ("b" * 100000)}).encode()
    conn = d.connect()
    conn.putrequest("POST", "/run")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for i in range(0, len(payload), 8192):
        part = payload[i:i + 8192]
        conn.send(b"%x\r\n%s\r\n" % (len(part), part))
    conn.send(b"0\r\n\r\n")
    r = conn.getresponse()
    assert r.status == 413, r.read()
    assert json.loads(r.read())["code"] == "PAYLOAD_TOO_LARGE"
    conn.close()
    assert d.ok("GET", "/health")["status"] == "ok"


def test_oversized_body_is_not_read(daemon_factory):
    """A declared length over the limit is answered before the body is sent."""
    d = daemon_factory("--max-body", "1K")
    conn = d.connect(timeout=10)
    conn.putrequest("POST", "/run")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(1 << 30))
    conn.endheaders()
    r = conn.getresponse()  # answered without a GiB of upload
    assert r.status == 413
    assert json.loads(r.read())["code"] == "PAYLOAD_TOO_LARGE"
    conn.close()


def test_odd_wire_requests_leave_daemon_healthy(shared_daemon):
    port = shared_daemon.port
    junk = [
        b"GARBAGE\r\n\r\n",
        b"GET /health HTTP/9.9\r\n\r\n",
        b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /contexts/%00 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"co",
        b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"POST /run HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"\x00\x01\x02\x03" * 1000,
    ]
    for data in junk:
        reply = raw_http(port, data)
        assert not reply or reply.startswith(b"HTTP/1."), reply[:200]
        if reply:
            status = int(reply.split()[1])
            # 505 is the answer to an HTTP version that does not exist.
            assert 400 <= status < 500 or status == 505, reply[:300]
    assert shared_daemon.ok("GET", "/health")["status"] == "ok"
    assert shared_daemon.run("1 + 1")["results"][0]["text"] == "2"


def test_paths_that_are_not_utf8_get_typed_404(shared_daemon):
    error_of(shared_daemon.get("/%FF"), 404, "NOT_FOUND")
    error_of(shared_daemon.get("/contexts/%FF%FE"), 404, "SESSION_NOT_FOUND")
    error_of(shared_daemon.get("/processes/%C3%28"), 404, "PROCESS_NOT_FOUND")
    error_of(shared_daemon.get("/contexts/a%2Fb"), 404, "NOT_FOUND")
    assert shared_daemon.ok("GET", "/health")["status"] == "ok"
