"""The edges a hostile or broken HTTP client hits first (SPEC section 6).

The daemon's own limits on a request (the URI, the headers, the body) are
checked by its code before libmicrohttpd's, so 413/414/431 carry our JSON
error body, or E2B's plain text on an E2B listener. Only a request the
library cannot parse at all (a broken request line, no Host, a bad
Content-Length or chunk, an HTTP version it does not speak, a head larger
than the library's memory for a connection) keeps the library's own answer:
for those the status code is checked, and that the daemon goes on without
a descriptor left behind. Connections cannot be exhausted: a request head
has a deadline (slowloris), one client address holds a bounded number of
connections, a newcomer takes the place of the connection that has waited
longest for a request head, and a reserve keeps GET /health and /metrics
answering when every slot is busy. The lockout scenario of the issue (300
silent and 20 trickling connections, then a fresh client) is run for real.

Clients come from several loopback addresses (127.0.0.0/8 is all loopback
on Linux) to tell the per-address limit from the total one.
"""

import json
import os
import re
import socket
import threading
import time

import pytest

from conftest import Daemon, error_of, wait_until
from kernels_testlib import KERNEL_ARGS, kernel_env

LOCKOUT_SILENT = 300
LOCKOUT_TRICKLING = 20
FRESH_DEADLINE_S = 2.0


def connect(port, source="127.0.0.1", timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s):
    chunks = []
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (ConnectionResetError, socket.timeout):
        pass
    return b"".join(chunks)


def exchange(port, raw, source="127.0.0.1", timeout=10.0):
    """Send raw bytes on a fresh connection; (status, headers, body) of the
    answer, or None when the connection ends without one."""
    s = connect(port, source, timeout)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = read_all(s)
    finally:
        s.close()
    if not data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    return status, headers, body


def health_from(port, source="127.0.0.1", timeout=FRESH_DEADLINE_S):
    started = time.monotonic()
    answer = exchange(port, b"GET /health HTTP/1.1\r\nHost: kb\r\nConnection: close\r\n\r\n",
                      source, timeout)
    return answer, time.monotonic() - started


def health(d):
    return d.ok("GET", "/health")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


# ---- the daemon's limits, in our words; the library's answers ---------------------

URI_MAX = 16 << 10      # KB_HTTP_URI_MAX: the request target as sent
HEADERS_MAX = 32 << 10  # KB_HTTP_HEADERS_MAX: "name: value\r\n" of each header line


def head_with(uri=b"/health", big=0):
    """A GET of uri with Host and, when big, an X-Big header line of big
    bytes (name, ": ", value and CRLF: what the daemon counts)."""
    extra = b"X-Big: " + b"a" * (big - 9) + b"\r\n" if big else b""
    return b"GET " + uri + b" HTTP/1.1\r\nHost: kb\r\n" + extra + b"\r\n"


HOST_BYTES = len(b"Host") + len(b"kb") + 4
HEAD_64K = head_with(big=65536)
URL_64K = b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\nHost: kb\r\n\r\n"

OURS = [
    ("headers_over_by_one", head_with(big=HEADERS_MAX - HOST_BYTES + 1), 431, "HEADERS_TOO_LARGE"),
    ("headers_64k", HEAD_64K, 431, "HEADERS_TOO_LARGE"),
    ("uri_over_by_one", head_with(uri=b"/" + b"a" * URI_MAX), 414, "URI_TOO_LONG"),
    ("uri_64k", URL_64K, 414, "URI_TOO_LONG"),
    ("query_over", head_with(uri=b"/health?q=" + b"a" * URI_MAX), 414, "URI_TOO_LONG"),
]

# (name, request, the statuses it may get; None: closed without an answer)
LIBRARYS = [
    ("no_target", b"NONSENSE\r\n\r\n", {None}),
    ("broken_request_line", b"GET / HTTP/1.1 extra\r\nHost: kb\r\n\r\n", {400}),
    ("bad_content_length",
     b"POST /run HTTP/1.1\r\nHost: kb\r\nContent-Length: abc\r\n\r\n", {400}),
    ("content_length_over_64_bits",
     b"POST /run HTTP/1.1\r\nHost: kb\r\nContent-Length: 99999999999999999999999\r\n\r\n",
     {413}),
    ("bad_chunk",
     b"POST /run HTTP/1.1\r\nHost: kb\r\nAuthorization: Bearer edge-token\r\n"
     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", {400}),
    ("http_version", b"GET /health HTTP/3.7\r\nHost: kb\r\n\r\n", {505}),
    # more than the library holds for a connection (KB_CONNECTION_MEMORY)
    ("head_beyond_the_librarys_memory", head_with(big=1 << 20), {431}),
    ("uri_beyond_the_librarys_memory", b"GET /" + b"a" * (1 << 20) + b" HTTP/1.1\r\n\r\n", {414}),
    ("thousands_of_query_arguments", head_with(uri=b"/health?" + b"a&" * 4096), {431, None}),
]


@pytest.fixture(scope="module")
def edges():
    d = Daemon(("--pool", "python=0"), token="edge-token")
    yield d
    d.close()


def requests_counted(d, method, code):
    text = d.get("/metrics").body.decode()
    found = re.search(r'^kernelbridge_http_requests_total\{method="%s",code="%d"\} (\d+)$'
                      % (method, code), text, re.M)
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize("name,raw,status,code", OURS, ids=[e[0] for e in OURS])
def test_a_request_over_our_limits_gets_our_error(edges, name, raw, status, code):
    counted = requests_counted(edges, "GET", status)
    answer = exchange(edges.port, raw)
    assert answer is not None, name
    got, headers, body = answer
    assert got == status, (name, got, body[:300])
    assert headers["content-type"] == "application/json", headers
    assert headers["connection"] == "close", headers
    assert int(headers["content-length"]) == len(body), (headers, body)
    error = json.loads(body)
    assert error["code"] == code and error["status_code"] == status, error
    assert "bytes; the limit is" in error["message"], error
    assert error["method"] == "GET" and error["path"].startswith("/"), error
    assert error["timestamp"].endswith("Z"), error
    # the daemon goes on, and counts it as any request it answers
    health(edges)
    assert requests_counted(edges, "GET", status) == counted + 1


def test_a_request_at_our_limits_is_served(edges):
    close = b"Connection: close\r\n"
    at_limit = head_with(big=HEADERS_MAX - HOST_BYTES - len(close))  # "name: value\r\n" too
    got, _, body = exchange(edges.port, at_limit.replace(b"Host: kb\r\n", b"Host: kb\r\n" + close))
    assert got == 200 and json.loads(body)["status"] == "ok", body[:300]
    at_limit = head_with(uri=b"/" + b"a" * (URI_MAX - 1))
    got, _, body = exchange(edges.port, at_limit.replace(
        b"Host: kb\r\n", b"Host: kb\r\nAuthorization: Bearer edge-token\r\n" + close))
    assert got == 404 and json.loads(body)["code"] == "NOT_FOUND", body[:300]


def test_a_body_over_our_limit_gets_our_error(edges):
    got, headers, body = exchange(
        edges.port, b"POST /run HTTP/1.1\r\nHost: kb\r\nAuthorization: Bearer edge-token\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (16 << 20 | 1))
    assert got == 413 and headers["content-type"] == "application/json", (got, body[:300])
    assert json.loads(body)["code"] == "PAYLOAD_TOO_LARGE", body


def test_what_the_library_cannot_parse_gets_its_status(edges):
    """The library's own answer (a changed contract: its body is
    its own, so only the status is ours to check); the daemon goes on,
    and keeps no descriptor of those connections."""
    baseline = open_fds(edges.proc.pid)
    counts = [("other", 400), ("other", 413), ("POST", 400)]
    counted = {k: requests_counted(edges, *k) for k in counts}
    for name, raw, statuses in LIBRARYS:
        answer = exchange(edges.port, raw)
        assert (answer and answer[0]) in statuses, (name, answer and answer[:2])
        health(edges)
    # the ones it answered after their request line are counted: the bad
    # Content-Lengths with their method unread, the bad chunk as a POST
    assert all(requests_counted(edges, *k) == counted[k] + 1 for k in counts), counted
    assert wait_until(lambda: open_fds(edges.proc.pid) <= baseline, 10), \
        (open_fds(edges.proc.pid), baseline)
    assert "<html" not in edges.log


def test_our_own_errors_stay_json_next_to_them(edges):
    answer = exchange(edges.port, b"GET /nowhere HTTP/1.1\r\nHost: kb\r\nConnection: close\r\n"
                      b"Authorization: Bearer edge-token\r\n\r\n")
    got, headers, body = answer
    assert got == 404 and headers["content-type"] == "application/json"
    assert json.loads(body)["code"] == "NOT_FOUND"
    error_of(edges.get("/contexts", token="wrong"), 401, "UNAUTHORIZED")


def test_an_e2b_listener_answers_them_in_plain_text(daemon_factory, tmp_path):
    port_file = tmp_path / "e2b-port"
    daemon_factory("--pool", "python=0", "--e2b-listen", "127.0.0.1:0",
                   "--e2b-port-file", str(port_file))
    assert wait_until(port_file.exists, 10)
    e2b_port = int(port_file.read_text())
    got, headers, body = exchange(e2b_port, HEAD_64K)
    assert got == 431 and headers["content-type"].startswith("text/plain"), headers
    assert b"<html" not in body and b"headers are larger" in body, body


# ---- connections: deadline, per address, eviction, reserve -----------------------

def test_a_silent_or_trickling_connection_is_closed_at_the_header_deadline(daemon_factory):
    d = daemon_factory("--pool", "python=0", "--header-timeout", "1")
    silent = connect(d.port)
    trickling = connect(d.port)
    kept_alive = connect(d.port)
    try:
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: kb\r\n\r\n")
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        trickling.sendall(b"GET /health HTTP/1.1\r\n")
        started = time.monotonic()
        ended = {}

        def feed():
            try:
                while time.monotonic() - started < 8:
                    trickling.sendall(b"X")
                    time.sleep(0.1)
            except OSError:
                ended["trickling"] = time.monotonic() - started

        feeder = threading.Thread(target=feed)
        feeder.start()
        silent.settimeout(8)
        assert silent.recv(1) == b""  # closed, no answer
        ended["silent"] = time.monotonic() - started
        kept_alive.settimeout(8)
        assert kept_alive.recv(1) == b""  # idle after its response: the deadline again
        feeder.join()
        assert 0.9 <= ended["silent"] < 3.0, ended
        assert "trickling" in ended and ended["trickling"] < 3.5, ended
        conns = health(d)["connections"]
        assert conns["header_timeouts"] >= 3, conns
    finally:
        for s in (silent, trickling, kept_alive):
            s.close()


def test_the_deadline_does_not_cut_a_request_in_progress(daemon_factory):
    d = daemon_factory(*KERNEL_ARGS, "--pool", "python=0", "--header-timeout", "1",
                       env=kernel_env())
    d.ok("POST", "/contexts", {"language": "python", "context_id": "slow"}, status=201)
    result = d.run("import time; time.sleep(2.5); print('done')", context_id="slow")
    assert result["error"] is None and result["logs"]["stdout"] == "done\n", result


def test_the_lockout_scenario_leaves_fresh_clients_answered(daemon_factory):
    """300 silent and 20 trickling connections (the default limits: 256
    connections, 128 per address), then fresh clients: each /health is
    answered within 2 s, every time, from the attackers' address too."""
    d = daemon_factory("--pool", "python=0", token="t0k")
    baseline = open_fds(d.proc.pid)
    attackers = []
    stop = threading.Event()
    try:
        for i in range(LOCKOUT_SILENT):
            attackers.append(connect(d.port, "127.0.0.%d" % (2 + i % 3)))
        trickling = []
        for i in range(LOCKOUT_TRICKLING):
            s = connect(d.port, "127.0.0.5")
            s.sendall(b"GET /health HTTP/1.1\r\n")
            trickling.append(s)
        attackers += trickling

        def trickle():
            while not stop.is_set():
                for s in trickling:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass
                stop.wait(0.2)

        feeder = threading.Thread(target=trickle)
        feeder.start()
        times = []
        for attempt in range(20):
            source = "127.0.0.1" if attempt % 2 == 0 else "127.0.0.2"
            answer, took = health_from(d.port, source)
            assert answer is not None and answer[0] == 200, (attempt, answer)
            times.append(took)
        assert max(times) < FRESH_DEADLINE_S, times
        # the API itself, not only the probe, takes a fresh client
        listing = exchange(d.port, b"GET /contexts HTTP/1.1\r\nHost: kb\r\nConnection: close\r\n"
                           b"Authorization: Bearer t0k\r\n\r\n")
        assert listing and listing[0] == 200, listing
        conns = health(d)["connections"]
        assert conns["open"] <= 256 + 16, conns
        assert conns["evicted"] >= LOCKOUT_SILENT + LOCKOUT_TRICKLING - 256, conns
    finally:
        stop.set()
        for s in attackers:
            s.close()
    # the attackers' connections leave no descriptor behind
    assert wait_until(lambda: open_fds(d.proc.pid) <= baseline + 2, 10), \
        (open_fds(d.proc.pid), baseline)
    assert health(d)["connections"]["open"] <= 2


def hold_busy(d, n, source):
    """A run's stream (one connection from 127.0.0.1) and n connections
    from source, each in a request that lasts: a wait on that run."""
    stream = d.run_stream("import time; time.sleep(20)")
    events = stream.events()
    start = next(events)
    assert start.event == "start", start
    held = []
    for _ in range(n):
        s = connect(d.port, source)
        s.sendall(b"GET /processes/%s/wait?timeout=15 HTTP/1.1\r\nHost: kb\r\n\r\n"
                  % start.data["process_id"].encode())
        held.append(s)
    # each head read before anyone else connects (a waiting one would give way)
    time.sleep(0.5)
    return stream, held


def still_open(s):
    """True while the daemon has neither answered nor closed s."""
    s.setblocking(False)
    try:
        s.recv(1)
        return False
    except BlockingIOError:
        return True
    finally:
        s.setblocking(True)


def release(stream, held):
    for s in held:
        s.close()
    if stream:
        stream.close()


def test_the_reserve_answers_probes_when_every_slot_is_busy(daemon_factory):
    d = daemon_factory(*KERNEL_ARGS, "--pool", "python=0", "--max-connections", "6",
                       "--max-connections-per-address", "6", "--connection-reserve", "2",
                       env=kernel_env())
    stream, held = None, []
    try:
        stream, held = hold_busy(d, 5, "127.0.0.2")
        assert wait_until(lambda: health(d)["connections"]["waiting"] == 0, 10)
        assert all(still_open(s) for s in held)  # with the stream: all 6 slots in requests
        answer, took = health_from(d.port, "127.0.0.3")
        assert answer and answer[0] == 200, answer
        got, headers, body = exchange(d.port, b"GET /contexts HTTP/1.1\r\nHost: kb\r\n"
                                      b"Connection: close\r\n\r\n", "127.0.0.3")
        assert got == 503 and json.loads(body)["code"] == "UNAVAILABLE", body
        assert b"/health" in body
        # at the limit a silent newcomer does not take the reserve: the
        # connection waiting longest for a head gives way to it
        extra = [connect(d.port, "127.0.0.4")]
        try:
            time.sleep(0.3)
            extra.append(connect(d.port, "127.0.0.4"))
            time.sleep(0.3)
            assert not still_open(extra[0]) and still_open(extra[1])
            answer, took = health_from(d.port, "127.0.0.4", timeout=5)
            assert answer and answer[0] == 200 and took < FRESH_DEADLINE_S, (answer, took)
            assert not still_open(extra[1])
            assert all(still_open(s) for s in held)  # requests never give way
            assert health(d)["connections"]["evicted"] >= 2
        finally:
            for s in extra:
                s.close()
    finally:
        release(stream, held)


def test_one_address_holds_at_most_its_share(daemon_factory):
    d = daemon_factory(*KERNEL_ARGS, "--pool", "python=0", "--max-connections-per-address", "3",
                       env=kernel_env())
    stream, held = None, []
    try:
        stream, held = hold_busy(d, 3, "127.0.0.2")
        assert wait_until(lambda: health(d)["connections"]["waiting"] == 0, 10)
        assert all(still_open(s) for s in held)
        before = health(d)["connections"]["refused"]
        # a 4th from that address: nothing of it can give way, so it is refused
        answer, took = health_from(d.port, "127.0.0.2", timeout=5)
        assert answer is None and took < FRESH_DEADLINE_S, (answer, took)
        assert health(d)["connections"]["refused"] == before + 1
        # another address is not held up
        answer, _ = health_from(d.port, "127.0.0.3")
        assert answer and answer[0] == 200
    finally:
        release(stream, held)
