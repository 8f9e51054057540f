"""run_code's result as MCP content, through raw HTTP on a real kernel
(SPEC section 14): HTML and SVG as embedded resources, ANSI removed from
text, output past --mcp-max-text cut with a note naming get_process_logs,
which gives the whole logs page by page; and a progress stream over SSE."""

import json
import socket
import time

import pytest

from .mcplib import TOKEN, Daemon

MAX_TEXT = 4096


@pytest.fixture(scope="module")
def small():
    d = Daemon("--pool", "python=0", "--mcp-max-text", str(MAX_TEXT))
    try:
        sid, _ = d.initialize()
        yield d, sid
    finally:
        d.stop()


def run(d, sid, code, **extra):
    reply = d.call(sid, "run_code", {"code": code, **extra})
    assert "result" in reply, reply
    return reply["result"]


def test_html_and_svg_are_embedded_resources(small):
    d, sid = small
    code = ("from IPython.display import HTML, SVG, display\n"
            "display(HTML('<b>bold</b>'))\n"
            "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"4\" height=\"4\"/>'))\n"
            "'done'")
    result = run(d, sid, code, timeout=60)
    assert result["isError"] is False
    resources = [c["resource"] for c in result["content"] if c["type"] == "resource"]
    assert [r["mimeType"] for r in resources] == ["text/html", "image/svg+xml"]
    assert resources[0]["text"] == "<b>bold</b>"
    assert resources[1]["text"].startswith("<svg")
    pid = result["structuredContent"]["process"]["process_id"]
    assert resources[0]["uri"] == f"kernelbridge://processes/{pid}/results/0.html"
    texts = [c["text"] for c in result["content"] if c["type"] == "text"]
    assert texts == ["'done'"]


def test_ansi_is_removed_from_text(small):
    d, sid = small
    result = run(d, sid, "print('\\x1b[31mred\\x1b[0m and \\x1b]0;title\\x07plain')")
    assert [c["text"] for c in result["content"]] == ["red and plain\n"]


def test_output_over_the_bound_is_cut_with_a_note(small):
    d, sid = small
    code = ("import time\nfor i in range(40):\n"
            "    print(f'{i:03d} ' + 'x' * 295, flush=True)\n    time.sleep(0.02)")
    result = run(d, sid, code)
    texts = [c["text"] for c in result["content"] if c["type"] == "text"]
    assert len(texts[0]) == MAX_TEXT
    pid = result["structuredContent"]["process"]["process_id"]
    assert "get_process_logs" in texts[-1] and pid in texts[-1], texts[-1]
    assert len(result["structuredContent"]["logs"]["stdout"]) == MAX_TEXT
    assert result["structuredContent"]["truncated"] is True
    # the whole output, page by page within the bound
    seen, cursor, pages = "", None, 0
    while True:
        args = {"process_id": pid} if cursor is None else {"process_id": pid, "cursor": cursor}
        logs = d.call(sid, "get_process_logs", args)["result"]["structuredContent"]
        page = "".join(f["data"] for f in logs["frames"] if f["channel"] == "stdout")
        assert len(page) <= MAX_TEXT + 200
        seen += page
        pages += 1
        if logs["eof"]:
            break
        cursor = logs["next_cursor"]
    assert pages > 1
    assert seen == "".join(f"{i:03d} " + "x" * 295 + "\n" for i in range(40))


def test_a_frame_over_the_bound_is_cut_in_get_process_logs(small):
    d, sid = small
    result = run(d, sid, "print('y' * 10000)")
    pid = result["structuredContent"]["process"]["process_id"]
    logs = d.call(sid, "get_process_logs", {"process_id": pid})["result"]["structuredContent"]
    first = logs["frames"][0]
    assert first["data"] == "y" * MAX_TEXT
    assert first["data_cut"] + MAX_TEXT in (10000, 10001)  # the newline may come apart


def test_progress_comes_as_an_sse_stream(small):
    d, sid = small
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "run_code", "_meta": {"progressToken": "p1"},
                       "arguments": {"code": "import time\nprint('a', flush=True)\n"
                                             "time.sleep(0.5)\nprint('b')"}}}
    r = d.post(body, session=sid)
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream", r
    data = [line[6:] for line in r.body.decode().splitlines() if line.startswith("data: ")]
    assert data[0] == ""  # 2025-11-25: the priming event (an id, no data) comes first
    events = [json.loads(d) for d in data[1:]]
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    assert [p["progressToken"] for p in progress] == ["p1"] * len(progress)
    assert "".join(p["message"] for p in progress) == "a\nb\n"
    assert events[-1]["id"] == 9 and events[-1]["result"]["isError"] is False
    # without text/event-stream in Accept, the same call is plain JSON
    r = d.post(body, session=sid, headers={"Accept": "application/json"})
    assert r.status == 200 and r.headers["content-type"] == "application/json", r
    assert r.json["result"]["structuredContent"]["logs"]["stdout"] == "a\nb\n"


def test_progress_is_rate_limited(small):
    d, sid = small
    code = "import time\nfor i in range(300):\n    print(i, flush=True)\n    time.sleep(0.005)"
    body = {"jsonrpc": "2.0", "id": 10, "method": "tools/call",
            "params": {"name": "run_code", "_meta": {"progressToken": "r"},
                       "arguments": {"code": code}}}
    started = time.monotonic()
    r = d.post(body, session=sid)
    took = time.monotonic() - started
    events = [json.loads(line[6:]) for line in r.body.decode().splitlines()
              if line.startswith("data: ") and len(line) > 6]
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    # 300 flushed prints, each in its own output message: all of them said,
    # in at most one notification each 100 ms (and a last one at the end)
    assert "".join(p["message"] for p in progress) == "".join("%d\n" % i for i in range(300))
    assert 2 <= len(progress) <= took / 0.1 + 1, (len(progress), took)
    assert events[-1]["id"] == 10


def test_a_client_that_goes_away_leaves_the_run_going(small):
    d, sid = small
    body = json.dumps({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
                       "params": {"name": "run_code", "_meta": {"progressToken": 1},
                                  "arguments": {"code": "import time\nprint('start', flush=True)\n"
                                                        "time.sleep(1.5)\nprint('went on')"}}})
    request = ("POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
               "Mcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s"
               % (TOKEN, sid, len(body), body)).encode()
    with socket.create_connection(("127.0.0.1", d.port), timeout=30) as sock:
        sock.sendall(request)
        seen = b""
        while b"start" not in seen:  # the run is on, and its progress came
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
    # gone; the run's record finishes as any run's does
    running = d.request("GET", path="/processes?state=running").json["processes"]
    assert len(running) == 1, running
    pid = running[0]["process_id"]
    state = d.request("GET", path=f"/processes/{pid}/wait?timeout=30").json
    assert state["state"] == "terminal" and state["reason"] == "exited", state
    logs = d.call(sid, "get_process_logs", {"process_id": pid})["result"]["structuredContent"]
    assert "".join(f["data"] for f in logs["frames"]) == "start\nwent on\n"
