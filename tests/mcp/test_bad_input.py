"""/mcp through raw HTTP (SPEC section 14): malformed
JSON, invalid requests and batches, unknown methods and tools, wrong
arguments, calls before initialize, unknown or ended sessions, a wrong
protocol version, an oversized body, a foreign Origin, no token. Each
gets the right HTTP status and JSON-RPC error, our error code in data;
nothing crashes and no context is left half-made."""

import threading
import time

from .mcplib import NEWEST, Daemon


def rpc_error(reply, status, code, our=None, field=None):
    assert reply.status == status, reply
    error = reply.json["error"]
    assert error["code"] == code, reply
    if our:
        assert error["data"]["code"] == our, reply
    if field:
        assert error["data"]["field"] == field, reply
    return error


def test_malformed_json_is_parse_error(mcp_daemon, session):
    r = mcp_daemon.post(b'{"jsonrpc": "2.0", "id": 1, "method": ', session=session)
    rpc_error(r, 400, -32700, "INVALID_REQUEST_BODY")
    assert r.json["id"] is None
    rpc_error(mcp_daemon.post(b"", session=session), 400, -32700)
    rpc_error(mcp_daemon.post(b"\xff\xfe", session=session), 400, -32700)


def test_json_that_is_no_message_is_invalid_request(mcp_daemon, session):
    for body in (b"42", b'"x"', b"[]", b"null"):
        rpc_error(mcp_daemon.post(body, session=session), 400, -32600, "BAD_REQUEST")
    error = rpc_error(mcp_daemon.post({"id": 1, "method": "ping"}, session=session), 400, -32600)
    assert error["data"]["field"] == "jsonrpc"
    rpc_error(mcp_daemon.post({"jsonrpc": "2.0", "id": 1, "method": 7}, session=session), 400,
              -32600, field="method")
    rpc_error(mcp_daemon.post({"jsonrpc": "2.0", "id": None, "method": "ping"}, session=session),
              400, -32600, field="id")
    rpc_error(mcp_daemon.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]},
                          session=session), 200, -32602, field="params")


def test_unknown_method(mcp_daemon, session):
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": "a", "method": "resources/list"}, session=session)
    error = rpc_error(r, 200, -32601, "NOT_FOUND")
    assert r.json["id"] == "a"
    assert "resources/list" in error["message"]


def test_unknown_tool_and_wrong_arguments_name_the_field(mcp_daemon, session):
    def call(name, arguments):
        return mcp_daemon.post({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                            "params": {"name": name, "arguments": arguments}}, session=session)

    rpc_error(call("rm_rf", {}), 200, -32602, "NOT_FOUND", "name")
    rpc_error(call("run_code", {}), 200, -32602, "BAD_REQUEST", "code")
    rpc_error(call("run_code", {"code": 1}), 200, -32602, "BAD_REQUEST", "code")
    rpc_error(call("run_code", {"code": "1", "timeout": "soon"}), 200, -32602, field="timeout")
    rpc_error(call("run_code", {"code": "1", "timeout": -1}), 200, -32602, "BAD_REQUEST",
              "timeout")
    rpc_error(call("run_code", {"code": "1", "color": "red"}), 200, -32602, field="color")
    rpc_error(call("run_code", {"code": "1", "env": {"A": 1}}), 200, -32602, "BAD_REQUEST")
    rpc_error(call("run_code", {"code": "1", "context_id": "no such/id"}), 200, -32602,
              "BAD_REQUEST", "context_id")
    rpc_error(call("run_code", {"code": "a\u0000b"}), 200, -32602, "BAD_REQUEST", "code")
    rpc_error(call("create_context", {"context_id": "bad id!"}), 200, -32602, "BAD_REQUEST",
              "context_id")
    rpc_error(call("create_context", {"env": []}), 200, -32602, field="env")
    rpc_error(call("delete_context", {}), 200, -32602, field="context_id")
    rpc_error(call("get_process_logs", {"process_id": "prc_1", "cursor": -2}), 200, -32602,
              "BAD_REQUEST", "cursor")
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                     "params": {"name": "run_code", "arguments": "code"}}, session=session)
    rpc_error(r, 200, -32602, field="arguments")
    # the service's refusals are the tool's errors, for the model to read
    result = mcp_daemon.call(session, "delete_context", {"context_id": "ctx_nothere"})["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("SESSION_NOT_FOUND: ")
    result = mcp_daemon.call(session, "create_context", {"language": "cobol"})["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("LANGUAGE_NOT_SUPPORTED: ")
    # nothing half-made
    listed = mcp_daemon.call(session, "list_contexts", {"all": True})["result"]
    assert listed["structuredContent"]["contexts"] == []
    assert mcp_daemon.request("GET", path="/processes").json["processes"] == []


def test_calls_before_initialize_and_unknown_sessions(mcp_daemon):
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    rpc_error(r, 400, -32600, "BAD_REQUEST")
    assert "Mcp-Session-Id" in r.json["error"]["message"]
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session="f" * 32)
    rpc_error(r, 404, -32600, "SESSION_NOT_FOUND")
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session="x" * 5000)
    assert r.status == 404, r
    rpc_error(mcp_daemon.request("DELETE"), 400, -32600)
    rpc_error(mcp_daemon.request("GET", headers={"Accept": "text/event-stream"}), 400, -32600)


def test_ended_session_is_refused(mcp_daemon):
    sid, _ = mcp_daemon.initialize()
    assert mcp_daemon.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid).status == 200
    assert mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid}).status == 204
    rpc_error(mcp_daemon.post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, session=sid), 404,
              -32600, "SESSION_NOT_FOUND")
    assert mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid}).status == 404


def test_version_negotiation_and_the_header(mcp_daemon):
    for asked, given in (("2025-03-26", "2025-03-26"), ("2025-06-18", "2025-06-18"),
                         (NEWEST, NEWEST), ("2024-11-05", NEWEST), ("1999-01-01", NEWEST)):
        sid, version = mcp_daemon.initialize(asked)
        assert version == given, asked
        mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid})
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    rpc_error(r, 200, -32602, field="protocolVersion")
    sid, _ = mcp_daemon.initialize("2025-06-18")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert mcp_daemon.post(ping, session=sid, version="2025-06-18").json["result"] == {}
    assert mcp_daemon.post(ping, session=sid).status == 200  # absent: 2025-03-26 assumed, allowed
    rpc_error(mcp_daemon.post(ping, session=sid, version="2030-01-01"), 400, -32600, "BAD_REQUEST")
    rpc_error(mcp_daemon.post(ping, session=sid, version=NEWEST), 400, -32600, "BAD_REQUEST")
    mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid})


def test_batches_as_each_revision_allows(mcp_daemon):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    sid, _ = mcp_daemon.initialize("2025-06-18")
    rpc_error(mcp_daemon.post([ping], session=sid), 400, -32600, "BAD_REQUEST")
    mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid})
    sid, _ = mcp_daemon.initialize("2025-03-26")
    r = mcp_daemon.post([ping, {"jsonrpc": "2.0", "id": 2, "method": "nope"},
                     {"jsonrpc": "2.0", "method": "notifications/initialized"}, 7], session=sid)
    assert r.status == 200, r
    assert [m.get("id") for m in r.json] == [1, 2, None]
    assert r.json[1]["error"]["code"] == -32601
    assert r.json[2]["error"]["code"] == -32600
    r = mcp_daemon.post([{"jsonrpc": "2.0", "method": "notifications/initialized"}], session=sid)
    assert r.status == 202 and r.body == b"", r
    mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid})


def test_notifications_and_responses_are_accepted(mcp_daemon, session):
    r = mcp_daemon.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 99}}, session=session)
    assert r.status == 202 and r.body == b"", r
    r = mcp_daemon.post({"jsonrpc": "2.0", "id": 3, "result": {}}, session=session)
    assert r.status == 202, r
    rpc_error(mcp_daemon.post({"jsonrpc": "2.0", "id": 3}, session=session), 400, -32600)


def test_oversized_body_is_413_and_the_daemon_goes_on(mcp_daemon, session):
    big = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + "x" * (80 << 10) + '"}}'
    r = mcp_daemon.post(big, session=session)
    assert r.status == 413, r
    assert r.json["code"] == "PAYLOAD_TOO_LARGE"
    ok = mcp_daemon.post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, session=session)
    assert ok.status == 200 and ok.json["result"] == {}


def test_origin_and_token(mcp_daemon, session):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for origin in ("http://evil.example", "http://127.0.0.1.evil.example", "null",
                   "https://app.example.evil"):
        r = mcp_daemon.post(ping, session=session, headers={"Origin": origin})
        rpc_error(r, 403, -32600)
    for origin in ("http://localhost:6274", "http://127.0.0.1:8080", "https://[::1]",
                   "https://app.example"):
        assert mcp_daemon.post(ping, session=session, headers={"Origin": origin}).status == 200
    r = mcp_daemon.post(ping, session=session, token=None)
    assert r.status == 401 and r.headers["www-authenticate"] == "Bearer", r
    assert mcp_daemon.post(ping, session=session, token="wrong").status == 401
    r = mcp_daemon.request("PUT", b"{}", headers={"Mcp-Session-Id": session})
    assert r.status == 405 and r.headers["allow"] == "POST, GET, DELETE", r


def test_get_stream_lasts_until_the_session_ends(mcp_daemon):
    sid, _ = mcp_daemon.initialize()
    r = mcp_daemon.request("GET", headers={"Mcp-Session-Id": sid, "Accept": "application/json"})
    rpc_error(r, 406, -32600)
    got = {}

    def read():
        got["reply"] = mcp_daemon.request("GET", headers={"Mcp-Session-Id": sid,
                                                      "Accept": "text/event-stream"}, timeout=30)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(1.0)
    assert reader.is_alive(), got
    ended = time.monotonic()
    assert mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid}).status == 204
    reader.join(10)
    assert not reader.is_alive()
    assert time.monotonic() - ended < 5
    reply = got["reply"]
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream"
    assert reply.body.startswith(b": kernelbridge\n\n")


def test_nothing_crashed(mcp_daemon):
    r = mcp_daemon.request("GET", path="/health")
    assert r.status == 200 and r.json["status"] == "ok"


def test_a_get_stream_does_not_hold_the_daemon_at_stop():
    d = Daemon("--pool", "python=0")
    try:
        sid, _ = d.initialize()
        reader = threading.Thread(target=lambda: d.request(
            "GET", headers={"Mcp-Session-Id": sid, "Accept": "text/event-stream"}, timeout=30))
        reader.start()
        time.sleep(0.5)
        started = time.monotonic()
    finally:
        d.stop()
    reader.join(10)
    assert not reader.is_alive()
    assert time.monotonic() - started < 3.0  # the drain's grace is 5 s
