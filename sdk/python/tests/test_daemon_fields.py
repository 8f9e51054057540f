"""The daemon's newer fields as optional attributes, in
both APIs, against real daemons; and the published API's objects unchanged
around them."""

from __future__ import annotations

import dataclasses
import inspect
import json
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

import pytest

import kernelbridge
from kernelbridge import (
    AsyncInterpreterContext,
    ContextResources,
    InterpreterContext,
    InterpreterResult,
    RunResources,
)

from .kbsdk_testlib import arun, start_daemon

LIMIT = 512 << 20


def _raw(daemon: Any, path: str) -> Dict[str, Any]:
    """The daemon's own JSON (what the SDK reads), by plain urllib."""
    request = urllib.request.Request(daemon.url + path)
    if daemon.token:
        request.add_header("Authorization", f"Bearer {daemon.token}")
    with urllib.request.urlopen(request, timeout=60) as response:
        body: Dict[str, Any] = json.loads(response.read())
    return body


def _assert_context_fields(ctx: Any, limited: bool) -> None:
    assert ctx.generation == 1
    if limited:
        assert (ctx.memory_limit, ctx.pids_limit) == (LIMIT, 32)
    else:
        assert ctx.memory_limit is None and ctx.pids_limit is None
    assert isinstance(ctx.resources, ContextResources)
    assert ctx.resources.memory_bytes > 0 and ctx.resources.pids >= 1


def _assert_result_fields(result: InterpreterResult) -> None:
    assert result.truncated is False
    assert isinstance(result.resources, RunResources)
    assert result.resources.wall_time_s > 0 and result.resources.peak_memory_bytes


def test_context_and_result_fields_sync(daemon, kb, new_id):
    limited = kb.create_context(language="python", context_id=new_id(), memory_limit=LIMIT, pids_limit=32)
    plain = kb.create_context(language="python", context_id=new_id())
    try:
        raw = _raw(daemon, f"/contexts/{plain.context_id}")
        assert raw["memory_limit"] is None and raw["pids_limit"] is None  # null on the wire ...
        _assert_context_fields(plain, limited=False)                      # ... None in the SDK
        _assert_context_fields(limited, limited=True)
        _assert_context_fields(kb.get_context(limited.context_id), limited=True)
        (listed,) = [c for c in kb.list_contexts() if c.context_id == limited.context_id]
        _assert_context_fields(listed, limited=True)
        assert isinstance(listed, InterpreterContext)
        # a handle built without a round trip knows none of them
        bare = kb.connect_context(limited.context_id)
        assert (bare.generation, bare.memory_limit, bare.pids_limit, bare.resources) == (None, None, None, None)
        assert bare == limited  # they are not part of the handle's identity
        _assert_result_fields(limited.run("sum(range(10**5))"))
        _assert_result_fields(kb.run("1 + 1", context=plain))
    finally:
        limited.close()
        plain.close()


def test_context_and_result_fields_async(daemon, new_id):
    async def body(svc):
        limited = await svc.create_context(language="python", context_id=new_id(), memory_limit=LIMIT,
                                           pids_limit=32)
        plain = await svc.create_context(language="python", context_id=new_id())
        try:
            _assert_context_fields(plain, limited=False)
            _assert_context_fields(limited, limited=True)
            _assert_context_fields(await svc.get_context(limited.context_id), limited=True)
            (listed,) = [c for c in await svc.list_contexts() if c.context_id == limited.context_id]
            _assert_context_fields(listed, limited=True)
            assert isinstance(listed, AsyncInterpreterContext)
            bare = svc.connect_context(limited.context_id)
            assert (bare.generation, bare.memory_limit, bare.pids_limit, bare.resources) == (None,) * 4
            _assert_result_fields(await limited.run("sum(range(10**5))"))
            _assert_result_fields(await svc.run("1 + 1", context=plain))
        finally:
            await limited.close()
            await plain.close()

    arun(daemon, body)


def test_truncated_in_both_apis(tmp_path):
    d = start_daemon(tmp_path / "capped", "--max-output", "64K")
    try:
        flood = "import sys\nfor _ in range(40):\n    sys.stdout.write('x' * 8192)\nsys.stdout.flush()\n'done'"
        with kernelbridge.connect(d.url) as kb:
            result = kb.run(flood)
            assert result.truncated is True and len(result.logs.stdout) <= 64 * 1024
            assert kb.run("'small'").truncated is False

        async def body(svc):
            result = await svc.run(flood)
            assert result.truncated is True and len(result.logs.stdout) <= 64 * 1024

        arun(d, body)
    finally:
        assert d.stop() == 0


def test_null_fields_become_none():
    """What a daemon sends as null (or an older daemon leaves out) reads as None."""
    nulls = {"context_id": "c1", "language": "python", "generation": None, "memory_limit": None,
             "pids_limit": None, "resources": None}
    for obj in (nulls, {"context_id": "c1", "language": "python"}):
        handle = AsyncInterpreterContext.from_json(obj, "sb_x")
        assert (handle.generation, handle.memory_limit, handle.pids_limit, handle.resources) == (None,) * 4
        blocking = InterpreterContext(handle, bridge=None)  # type: ignore[arg-type]  # reads need no loop
        assert (blocking.generation, blocking.memory_limit, blocking.pids_limit, blocking.resources) == (None,) * 4
    result = InterpreterResult.from_json({"process": {"process_id": "prc_1", "exit_code": 0, "reason": "exited"},
                                          "resources": None, "truncated": None})
    assert result.resources is None and result.truncated is False
    assert InterpreterResult.from_json({"process": {}}).resources is None


# -- the published API is unchanged ---------------------------------------------

def _fields(cls: type) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_seed_models_unchanged():
    t = kernelbridge
    assert _fields(t.InterpreterDisplay) == ["mime", "data"]
    assert _fields(t.InterpreterProcess) == ["process_id", "exit_code", "signal", "reason", "raw_reason"]
    assert _fields(t.InterpreterLogs) == ["stdout", "stderr"]
    assert _fields(t.InterpreterError) == ["name", "value", "traceback"]
    assert _fields(t.InterpreterOutput)[:7] == ["data", "is_main_result", "text", "html", "png", "svg", "json"]
    assert _fields(t.InterpreterResult)[:4] == ["process", "results", "logs", "error"]
    assert _fields(AsyncInterpreterContext)[:3] == ["sandbox_id", "context_id", "language"]
    assert t.InterpreterContextJSON.__required_keys__ == {"sandbox_id", "context_id", "language"}
    assert t.InterpreterContextJSON.__optional_keys__ == {"generation"}
    for cls in (t.InterpreterDisplay, t.InterpreterProcess, t.InterpreterLogs, t.InterpreterError,
                t.InterpreterOutput, t.InterpreterResult, AsyncInterpreterContext):
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    # every field added after the published ones has a default, so the
    # published constructors still work, and the handle's added fields do
    # not take part in its equality
    for cls, published in ((t.InterpreterResult, 4), (t.InterpreterOutput, 7), (AsyncInterpreterContext, 3)):
        for f in dataclasses.fields(cls)[published:]:
            assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, f
    assert [f.name for f in dataclasses.fields(AsyncInterpreterContext) if not f.compare] == [
        "generation", "memory_limit", "pids_limit", "resources", "forked_from", "restored_from"]
    process = t.InterpreterProcess("prc_1", 0, None, t.WaitReason.EXITED)
    assert t.InterpreterResult(process).truncated is False and t.InterpreterResult(process).resources is None
    ctx = AsyncInterpreterContext("sb", "c", "python")
    assert ctx.to_json() == {"sandbox_id": "sb", "context_id": "c", "language": "python"}


# (parameter, kind, default) of the published signatures; extra parameters
# may only follow, keyword-only with a default.
_P = inspect.Parameter
SEED_SIGNATURES: Dict[str, List[Tuple[str, Any, Any]]] = {
    "create_context": [("language", _P.KEYWORD_ONLY, _P.empty), ("context_id", _P.KEYWORD_ONLY, None),
                       ("cwd", _P.KEYWORD_ONLY, None), ("env", _P.KEYWORD_ONLY, None),
                       ("request_timeout", _P.KEYWORD_ONLY, None)],
    "connect_context": [("context", _P.POSITIONAL_OR_KEYWORD, _P.empty), ("language", _P.KEYWORD_ONLY, None)],
    "get_context": [("context", _P.POSITIONAL_OR_KEYWORD, _P.empty), ("language", _P.KEYWORD_ONLY, None)],
    "list_contexts": [],
    "delete_context": [("context", _P.POSITIONAL_OR_KEYWORD, _P.empty)],
    "run": [("code", _P.POSITIONAL_OR_KEYWORD, _P.empty), ("language", _P.KEYWORD_ONLY, "python"),
            ("context", _P.KEYWORD_ONLY, None), ("isolated", _P.KEYWORD_ONLY, False),
            ("timeout", _P.KEYWORD_ONLY, None), ("cwd", _P.KEYWORD_ONLY, None), ("env", _P.KEYWORD_ONLY, None)],
}
SEED_CONTEXT_SIGNATURES: Dict[str, List[Tuple[str, Any, Any]]] = {
    "run": [("code", _P.POSITIONAL_OR_KEYWORD, _P.empty), ("cwd", _P.KEYWORD_ONLY, None),
            ("env", _P.KEYWORD_ONLY, None), ("timeout", _P.KEYWORD_ONLY, None)],
    "close": [],
}
SEED_CODE_INTERPRETER_SIGNATURES: Dict[str, List[Tuple[str, Any, Any]]] = {
    "run_code": [("code", _P.POSITIONAL_OR_KEYWORD, _P.empty), ("context", _P.KEYWORD_ONLY, None),
                 ("on_stdout", _P.KEYWORD_ONLY, None), ("on_stderr", _P.KEYWORD_ONLY, None),
                 ("on_error", _P.KEYWORD_ONLY, None), ("envs", _P.KEYWORD_ONLY, None),
                 ("timeout", _P.KEYWORD_ONLY, None)],
    "create_context": [("cwd", _P.POSITIONAL_OR_KEYWORD, None), ("request_timeout", _P.POSITIONAL_OR_KEYWORD, None)],
    "list_contexts": [("request_timeout", _P.POSITIONAL_OR_KEYWORD, None)],
    "delete_context": [("context", _P.POSITIONAL_OR_KEYWORD, _P.empty),
                       ("request_timeout", _P.POSITIONAL_OR_KEYWORD, None)],
}


def _assert_signature(cls: type, name: str, published: List[Tuple[str, Any, Any]],
                      is_coroutine: Optional[bool]) -> None:
    method = getattr(cls, name)
    params = list(inspect.signature(method).parameters.values())[1:]  # self
    got = [(p.name, p.kind, p.default) for p in params]
    assert got[:len(published)] == published, f"{cls.__name__}.{name}{inspect.signature(method)}"
    for extra in params[len(published):]:
        assert extra.kind is _P.KEYWORD_ONLY and extra.default is not _P.empty, f"{cls.__name__}.{name}: {extra}"
    if is_coroutine is not None:
        assert inspect.iscoroutinefunction(method) is is_coroutine, f"{cls.__name__}.{name}"


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_seed_service_signatures_unchanged(name):
    asynchronous = None if name in ("get_context",) else name != "connect_context"
    _assert_signature(kernelbridge.AsyncInterpreterService, name, SEED_SIGNATURES[name], asynchronous)
    _assert_signature(kernelbridge.InterpreterService, name, SEED_SIGNATURES[name], False)


def test_seed_context_and_earlier_api_signatures_unchanged():
    for name, published in SEED_CONTEXT_SIGNATURES.items():
        _assert_signature(AsyncInterpreterContext, name, published, True)
        _assert_signature(kernelbridge.InterpreterContext, name, published, False)
    for name, published in SEED_CODE_INTERPRETER_SIGNATURES.items():
        _assert_signature(kernelbridge.AsyncCodeInterpreter, name, published, True)
        _assert_signature(kernelbridge.CodeInterpreter, name, published, False)
    # the published constructors first; the routing keywords only after, keyword-only
    for cls, published in ((kernelbridge.AsyncInterpreterService, ["sandbox_id", "transport", "process"]),
                           (kernelbridge.InterpreterService, ["impl", "bridge"]),
                           (kernelbridge.InterpreterContext, ["impl", "bridge"])):
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        assert [p.name for p in params[:len(published)]] == published, cls
        assert all(p.kind is _P.POSITIONAL_OR_KEYWORD for p in params[:len(published)]), cls
        assert all(p.kind is _P.KEYWORD_ONLY and p.default is not _P.empty
                   for p in params[len(published):]), cls
        assert kernelbridge.SyncBridge.__name__ == "SyncBridge"
    for prop in ("sandbox_id", "context_id", "language"):
        assert isinstance(getattr(kernelbridge.InterpreterContext, prop), property)
    bind = inspect.signature(AsyncInterpreterContext.bind).parameters
    assert list(bind)[1:] == ["runner", "closer"]


def test_chart_and_table_as_optional_fields(kb):
    """A figure's chart and a DataFrame's columns, from the daemon's IPython
    extension, as InterpreterOutput.chart / .table; None elsewhere."""
    figure = kb.run(
        "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\nax.bar(['a', 'b'], [3, 5])\nax.set_title('T')\nfig"
    )
    assert figure.error is None, figure.error
    chart = figure.results[0].chart
    assert chart is not None and chart["type"] == "bar" and chart["title"] == "T"
    assert [(e["label"], e["value"]) for e in chart["elements"]] == [("a", 3), ("b", 5)]
    assert figure.results[0].table is None
    frame = kb.run("import pandas as pd\npd.DataFrame({'n': [1, 2], 's': ['x', None]})")
    assert frame.results[0].table == {"n": [1, 2], "s": ["x", None]}
    assert frame.results[0].chart is None
    plain = kb.run("1 + 1")
    assert (plain.results[0].chart, plain.results[0].table, plain.results[0].text) == (None, None, "2")
    fields = {f.name for f in dataclasses.fields(kernelbridge.InterpreterOutput)}
    assert {"chart", "table"} <= fields
