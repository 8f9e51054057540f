"""The fork tools of SPEC section 14 through raw HTTP on real kernels:
fork_context keeps the parent's variables, checkpoint_context then
restore_context puts a variable back, run_code's rollback on_error keeps
the state from before a failed run, and a bash context is refused as the
tool's error (isError), not as a protocol error."""

import pytest

from .mcplib import Daemon


@pytest.fixture(scope="module")
def forks():
    d = Daemon("--pool", "python=0")
    try:
        sid, _ = d.initialize()
        yield d, sid
    finally:
        d.stop()


def tool(d, sid, name, args):
    reply = d.call(sid, name, args)
    assert "result" in reply, reply
    return reply["result"]


def ok(d, sid, name, args):
    result = tool(d, sid, name, args)
    assert not result.get("isError"), result
    return result["structuredContent"]


def value(d, sid, code, context_id):
    result = ok(d, sid, "run_code", {"code": code, "context_id": context_id, "timeout": 60})
    assert result["error"] is None, result["error"]
    return result["results"][0]["text"] if result["results"] else None


def new_python(d, sid, context_id):
    return ok(d, sid, "create_context", {"language": "python", "context_id": context_id})


def test_the_tools_are_listed_with_their_schemas(forks):
    d, sid = forks
    r = d.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session=sid)
    tools = {t["name"]: t for t in r.json["result"]["tools"]}
    assert tools["fork_context"]["inputSchema"]["required"] == ["context_id"]
    assert {"count", "context_ids"} <= set(tools["fork_context"]["inputSchema"]["properties"])
    assert tools["checkpoint_context"]["inputSchema"]["required"] == ["context_id"]
    assert tools["restore_context"]["inputSchema"]["required"] == ["context_id", "checkpoint_id"]
    assert tools["run_code"]["inputSchema"]["properties"]["rollback"]["enum"] == \
        ["never", "on_error"]


def test_a_fork_keeps_the_parents_variable(forks):
    d, sid = forks
    new_python(d, sid, "mp")
    value(d, sid, "x = 41", "mp")
    answer = ok(d, sid, "fork_context", {"context_id": "mp"})
    assert len(answer["contexts"]) == 1
    child = answer["contexts"][0]
    assert child["context_id"].startswith("ctx_") and child["forked_from"]["context_id"] == "mp"
    assert value(d, sid, "x + 1", child["context_id"]) == "42"
    value(d, sid, "x = 0", child["context_id"])
    assert value(d, sid, "x", "mp") == "41"

    named = ok(d, sid, "fork_context", {"context_id": "mp", "context_ids": ["mf1", "mf2"]})
    assert [c["context_id"] for c in named["contexts"]] == ["mf1", "mf2"]
    assert value(d, sid, "x", "mf2") == "41"
    for cid in ("mf1", "mf2", child["context_id"]):
        ok(d, sid, "delete_context", {"context_id": cid})


def test_checkpoint_then_restore_puts_a_variable_back(forks):
    d, sid = forks
    new_python(d, sid, "mc")
    value(d, sid, "y = 'kept'", "mc")
    checkpoint = ok(d, sid, "checkpoint_context", {"context_id": "mc"})
    assert checkpoint["context_id"] == "mc" and checkpoint["checkpoint_id"]
    value(d, sid, "y = 'changed'", "mc")
    context = ok(d, sid, "restore_context",
                 {"context_id": "mc", "checkpoint_id": checkpoint["checkpoint_id"]})
    assert context["context_id"] == "mc" and context["generation"] == 2
    assert context["restored_from"]["checkpoint_id"] == checkpoint["checkpoint_id"]
    assert value(d, sid, "y", "mc") == "'kept'"

    missing = tool(d, sid, "restore_context", {"context_id": "mc", "checkpoint_id": "cp_none"})
    assert missing["isError"] is True
    assert missing["content"][0]["text"].startswith("CHECKPOINT_NOT_FOUND"), missing


def test_rollback_on_error_keeps_the_state_from_before(forks):
    d, sid = forks
    new_python(d, sid, "mr")
    value(d, sid, "x = 1", "mr")
    failed = tool(d, sid, "run_code",
                  {"code": "x = 2\n1/0", "context_id": "mr", "rollback": "on_error", "timeout": 60})
    assert failed["isError"] is True
    assert failed["structuredContent"]["rolled_back"] is True
    assert failed["structuredContent"]["error"]["name"] == "ZeroDivisionError"
    assert value(d, sid, "x", "mr") == "1"

    fine = ok(d, sid, "run_code", {"code": "x = 3", "context_id": "mr", "rollback": "on_error"})
    assert fine["rolled_back"] is False
    assert value(d, sid, "x", "mr") == "3"
    kept = tool(d, sid, "run_code", {"code": "x = 4\n1/0", "context_id": "mr", "rollback": "never"})
    assert kept["isError"] is True and not kept["structuredContent"].get("rolled_back")
    assert value(d, sid, "x", "mr") == "4"


def test_bash_is_refused_as_the_tools_error(forks):
    d, sid = forks
    ok(d, sid, "create_context", {"language": "bash", "context_id": "mb"})
    for name, args in (("fork_context", {"context_id": "mb"}),
                       ("checkpoint_context", {"context_id": "mb"}),
                       ("restore_context", {"context_id": "mb", "checkpoint_id": "cp_x"}),
                       ("run_code", {"code": "echo", "context_id": "mb", "rollback": "on_error"})):
        result = tool(d, sid, name, args)
        assert result["isError"] is True, (name, result)
        assert result["content"][0]["text"].startswith("UNSUPPORTED_OPTION"), (name, result)


def test_bad_arguments_are_invalid_params(forks):
    d, sid = forks
    for name, args, field in (
            ("fork_context", {"context_id": "mp", "count": "two"}, "count"),
            ("fork_context", {"context_id": "mp", "count": 0}, "count"),
            ("fork_context", {"context_id": "mp", "context_ids": "mf"}, "context_ids"),
            ("fork_context", {"context_id": "mp", "count": 1, "context_ids": ["a", "b"]}, "count"),
            ("fork_context", {"count": 1}, "context_id"),
            ("restore_context", {"context_id": "mp"}, "checkpoint_id"),
            ("run_code", {"code": "1", "rollback": "maybe"}, "rollback")):
        reply = d.call(sid, name, args)
        assert reply["error"]["code"] == -32602, (name, args, reply)
        assert field in reply["error"]["message"], (name, args, reply)
