"""The earlier-style API (CodeInterpreter / AsyncCodeInterpreter) against a real daemon."""

from __future__ import annotations

import asyncio

import pytest

import kernelbridge
from kernelbridge import (
    AsyncCodeInterpreter,
    CodeInterpreter,
    CodeInterpreterContext,
    ExecutionError,
    ExecutionResult,
    OutputMessage,
)

from .kbsdk_testlib import arun

COUNTING = """
import sys, time
for i in range(3):
    print(i, flush=True)
    time.sleep(0.1)
sys.stderr.write("Counting done!"); sys.stderr.flush()
"""


def test_run_code_default_context_persists(kb):
    ci = kb.code_interpreter
    assert isinstance(ci, CodeInterpreter)
    ci.run_code("legacy_x = 100")
    result = ci.run_code("print(legacy_x)")
    assert isinstance(result, ExecutionResult)
    assert result.stdout == "100\n" and result.stderr == "" and result.error is None
    assert kb.run("legacy_x").text == "100"  # the same default-python context


def test_run_code_handlers_envs_timeout(kb):
    ci = CodeInterpreter(kb)
    out, err, errors = [], [], []
    result = ci.run_code(COUNTING, on_stdout=out.append, on_stderr=err.append, on_error=errors.append,
                         timeout=30)
    assert all(isinstance(m, OutputMessage) for m in out + err)
    assert "".join(m.output for m in out) == "0\n1\n2\n" == result.stdout
    assert "".join(m.output for m in err) == "Counting done!" == result.stderr
    assert errors == []
    failing = ci.run_code("raise ValueError('legacy')", on_error=errors.append)
    assert isinstance(failing.error, ExecutionError)
    assert (failing.error.name, failing.error.value) == ("ValueError", "legacy")
    assert "ValueError" in failing.error.traceback
    assert errors == [failing.error]
    env = ci.run_code("import os; print(os.environ.get('LEGACY_ENV'))", envs={"LEGACY_ENV": "yes"})
    assert env.stdout == "yes\n"
    assert ci.run_code("import os; print(os.environ.get('LEGACY_ENV'))").stdout == "None\n"
    timed = ci.run_code("import time; time.sleep(20)", timeout=1)
    assert timed.error is not None and timed.error.name == "TimeoutError"
    assert ci.run_code("print('after')", timeout=0).stdout == "after\n"


def test_contexts_create_list_delete(kb, tmp_path):
    ci = kb.code_interpreter
    ci.run_code("1")
    ctx = ci.create_context(cwd=str(tmp_path), request_timeout=60)
    assert isinstance(ctx, CodeInterpreterContext)
    assert ctx.id.startswith("ctx_") and ctx.language == "python" and ctx.cwd == str(tmp_path)
    ci.run_code("x = 100", context=ctx)
    assert ci.run_code("print(x)", context=ctx).stdout == "100\n"
    assert ci.run_code("print(x)").error.name == "NameError"  # not in the default context
    assert ci.run_code("import os; print(os.getcwd())", context=ctx).stdout == f"{tmp_path}\n"
    listed = ci.list_contexts(request_timeout=30)
    assert ctx.id in {c.id for c in listed}
    assert "default-python" not in {c.id for c in listed}
    assert all(c.language == "python" for c in listed)
    ci.delete_context(ctx, request_timeout=30)
    assert ctx.id not in {c.id for c in ci.list_contexts()}
    with pytest.raises(kernelbridge.SessionNotFoundError):
        ci.run_code("1", context=ctx)
    with pytest.raises(kernelbridge.SessionNotFoundError):
        ci.delete_context(ctx)
    with pytest.raises(kernelbridge.ProtectedContextError):
        ci.delete_context("default-python")
    # new-style handles are accepted too
    handle = kb.create_context(language="python")
    assert ci.run_code("print('h')", context=handle).stdout == "h\n"
    ci.delete_context(handle)


def test_async_code_interpreter(daemon):
    async def body(svc):
        ci = svc.code_interpreter
        assert isinstance(ci, AsyncCodeInterpreter)
        trace = []

        async def on_stdout(msg):
            trace.append(("begin", msg.output))
            await asyncio.sleep(0.02)
            trace.append(("end", msg.output))

        result = await ci.run_code(COUNTING, on_stdout=on_stdout,
                                   on_stderr=lambda m: trace.append(("stderr", m.output)))
        assert result.stdout == "0\n1\n2\n" and result.stderr == "Counting done!"
        assert trace[-1] == ("stderr", "Counting done!")
        for i, (step, text) in enumerate(trace):
            if step == "begin":
                assert trace[i + 1] == ("end", text)
        ctx = await ci.create_context(request_timeout=60)
        await ci.run_code("y = 1", context=ctx, envs={"A": "b"})
        assert (await ci.run_code("print(y)", context=ctx)).stdout == "1\n"
        assert ctx.id in {c.id for c in await ci.list_contexts()}
        await ci.delete_context(ctx)
        with pytest.raises(kernelbridge.ProtectedContextError):
            await ci.delete_context(CodeInterpreterContext(id="default-python"))
        with pytest.raises(kernelbridge.KernelBridgeTimeoutError):
            await ci.list_contexts(request_timeout=1e-6)
        errors = []
        failed = await ci.run_code("undefined_name_here", on_error=errors.append)
        assert failed.error.name == "NameError" and errors == [failed.error]

    arun(daemon, body)
