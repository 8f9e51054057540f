"""Resuming /mcp's SSE streams with Last-Event-ID, through raw HTTP on a
real kernel (Streamable HTTP's resumability): a call's stream whose
connection was lost is resumed by GET from the event after the id, live
while the run goes on and replayed after its end; a GET stream too; the
priming event of 2025-11-25 and none before it; ids this server never
gave the session (400) and ids whose events are no longer held (410)."""

import http.client
import json

import pytest

from .mcplib import HTTP_TIMEOUT, TOKEN, Daemon

LOOP = ("import time\n"
        "for i in range(6):\n"
        "    print('tick', i, flush=True)\n"
        "    time.sleep(0.4)\n")


@pytest.fixture(scope="module")
def resumable():
    d = Daemon("--pool", "python=0")
    try:
        yield d
    finally:
        d.stop()


class Stream:
    """An SSE response read event by event (id, data) as it comes."""

    def __init__(self, d, method, session, body=None, headers=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=HTTP_TIMEOUT)
        all_headers = {"Authorization": "Bearer " + TOKEN, "Mcp-Session-Id": session,
                       "Accept": "application/json, text/event-stream"}
        if body is not None:
            all_headers["Content-Type"] = "application/json"
            body = json.dumps(body).encode()
        all_headers.update(headers or {})
        self.conn.request(method, "/mcp", body=body, headers=all_headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.headers = {k.lower(): v for k, v in self.response.getheaders()}

    def next_event(self):
        """(id, data as JSON or None for an empty one), or None at the end;
        comments are skipped."""
        event_id, data = None, []
        while True:
            line = self.response.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if event_id is None and not data:
                    continue  # a comment's end
                text = "\n".join(data)
                return event_id, json.loads(text) if text else None
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            if field == "id":
                event_id = value
            elif field == "data":
                data.append(value)

    def rest(self):
        events = []
        while (event := self.next_event()) is not None:
            events.append(event)
        return events

    def close(self):
        self.conn.close()


def seq(event_id):
    number, _, n = event_id.partition("-")
    return int(number), int(n)


def call_body(rid, code, token="t"):
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "run_code", "_meta": {"progressToken": token},
                       "arguments": {"code": code, "timeout": 60}}}


def resume(d, session, last):
    return Stream(d, "GET", session, headers={"Last-Event-ID": last})


def test_a_lost_call_stream_resumes_live_then_replays(resumable):
    d = resumable
    sid, _ = d.initialize("2025-11-25")
    first = Stream(d, "POST", sid, call_body(21, LOOP))
    try:
        assert first.status == 200 and first.headers["content-type"] == "text/event-stream"
        primer = first.next_event()
        assert primer[1] is None  # 2025-11-25: an id and empty data first
        number, n = seq(primer[0])
        assert n == 1
        got = first.next_event()  # the first progress: the run is on
        assert got[1]["method"] == "notifications/progress", got
        assert seq(got[0]) == (number, 2)
    finally:
        first.close()  # the connection is lost mid-run

    again = resume(d, sid, got[0])
    try:
        assert again.status == 200 and again.headers["content-type"] == "text/event-stream"
        assert again.headers["mcp-session-id"] == sid
        events = again.rest()
    finally:
        again.close()
    # the events after the id, in order, none twice, to the call's response
    assert [seq(e[0]) for e in events] == [(number, 3 + i) for i in range(len(events))]
    progress = [e[1]["params"] for e in events[:-1]]
    assert all(p["progressToken"] == "t" for p in progress)
    assert [p["progress"] for p in progress] == list(range(2, 2 + len(progress)))
    response = events[-1][1]
    assert response["id"] == 21 and response["result"]["isError"] is False, response
    stdout = "".join("tick %d\n" % i for i in range(6))
    assert response["result"]["structuredContent"]["logs"]["stdout"] == stdout
    assert got[1]["params"]["message"] + "".join(p["message"] for p in progress) == stdout

    # after the end, the whole stream is replayed from the primer's id
    replay = resume(d, sid, primer[0])
    try:
        events = replay.rest()
    finally:
        replay.close()
    assert [seq(e[0])[1] for e in events] == list(range(2, 2 + len(events)))
    assert events[-1][1]["id"] == 21
    d.request("DELETE", headers={"Mcp-Session-Id": sid})


def test_older_revisions_get_ids_without_a_primer(resumable):
    d = resumable
    sid, version = d.initialize("2025-06-18")
    assert version == "2025-06-18"
    stream = Stream(d, "POST", sid, call_body(3, "print('x')"), headers={
        "MCP-Protocol-Version": "2025-06-18"})
    try:
        events = stream.rest()
    finally:
        stream.close()
    assert events[0][1] is not None and seq(events[0][0])[1] == 1
    assert events[-1][1]["id"] == 3
    again = resume(d, sid, events[0][0])
    try:
        assert again.status == 200
        assert [e[1] for e in again.rest()] == [e[1] for e in events[1:]]
    finally:
        again.close()
    d.request("DELETE", headers={"Mcp-Session-Id": sid})


def test_a_get_stream_resumes_until_its_session_ends(resumable):
    d = resumable
    sid, _ = d.initialize("2025-11-25")
    stream = Stream(d, "GET", sid)
    try:
        assert stream.status == 200
        primer = stream.next_event()
        assert primer[1] is None and seq(primer[0])[1] == 1
    finally:
        stream.close()
    again = resume(d, sid, primer[0])
    try:
        assert again.status == 200 and again.headers["content-type"] == "text/event-stream"
        assert d.request("DELETE", headers={"Mcp-Session-Id": sid}).status == 204
        assert again.rest() == []  # nothing more: the stream ended with its session
    finally:
        again.close()
    # the ended session's streams are not for resuming
    r = d.request("GET", headers={"Mcp-Session-Id": sid, "Last-Event-ID": primer[0]})
    assert r.status == 404, r


def test_ids_never_given_are_refused(resumable):
    d = resumable
    sid, _ = d.initialize()
    other, _ = d.initialize()
    stream = Stream(d, "GET", other)
    try:
        other_id = stream.next_event()[0]
    finally:
        stream.close()
    # malformed, never handed out, and another session's
    for bad in ("nonsense", "1", "-1", "1-x", "99999999-1", other_id):
        r = d.request("GET", headers={"Mcp-Session-Id": sid, "Last-Event-ID": bad})
        assert r.status == 400, (bad, r)
        error = r.json["error"]
        assert error["code"] == -32600 and error["data"]["code"] == "BAD_REQUEST", r
        assert "Last-Event-ID" in error["message"]
    # the stream's own session may resume it; a seq not given yet is unknown
    r = d.request("GET", headers={"Mcp-Session-Id": other,
                                  "Last-Event-ID": "%d-999" % seq(other_id)[0]})
    assert r.status == 400, r
    for s in (sid, other):
        d.request("DELETE", headers={"Mcp-Session-Id": s})


def test_ids_of_streams_no_longer_held_are_gone(resumable):
    d = resumable
    sid, _ = d.initialize()
    ids = []
    for rid in range(17):  # past the 16 ended streams a session keeps
        stream = Stream(d, "POST", sid, call_body(100 + rid, "1+1"))
        try:
            events = stream.rest()
        finally:
            stream.close()
        assert events[-1][1]["id"] == 100 + rid
        ids.append(events[0][0])
    r = d.request("GET", headers={"Mcp-Session-Id": sid, "Last-Event-ID": ids[0]})
    assert r.status == 410, r
    error = r.json["error"]
    assert error["data"]["code"] == "LIMIT_EXCEEDED" and "get_process_logs" in error["message"]
    again = resume(d, sid, ids[1])  # the newer ones are still held
    try:
        assert again.status == 200 and again.rest()[-1][1]["id"] == 101
    finally:
        again.close()
    d.request("DELETE", headers={"Mcp-Session-Id": sid})
