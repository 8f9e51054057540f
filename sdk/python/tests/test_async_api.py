"""The async API (AsyncInterpreterService / AsyncInterpreterContext) against a real daemon."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

import kernelbridge
from kernelbridge import (
    AsyncInterpreterContext,
    InterpreterDisplay,
    InterpreterError,
    WaitReason,
)

from .kbsdk_testlib import arun, merge_kinds, PLAIN_LANGUAGE, RICH_CODE, running_process_async, tiny_png


def test_connect_async_reads_environment(daemon, monkeypatch):
    monkeypatch.setenv("KB_URL", daemon.url)
    monkeypatch.setenv("KB_TOKEN", daemon.token)

    async def body():
        service = await kernelbridge.connect_async()
        try:
            health = await service.health()
            assert service.sandbox_id == health["sandbox_id"] != ""
            assert await service.list_contexts() is not None  # the token was taken from KB_TOKEN
        finally:
            await service.aclose()

    asyncio.run(body())


def test_run_default_context_value_logs_and_state(daemon):
    async def body(svc):
        first = await svc.run("kb_async_state = 20\nprint('hello')\nimport sys; sys.stderr.write('warn\\n')")
        assert first.process.reason is WaitReason.EXITED
        assert first.process.exit_code == 0 and first.process.signal is None
        assert first.process.process_id.startswith("prc_")
        assert first.logs.stdout == "hello\n"
        assert first.logs.stderr == "warn\n"
        assert first.error is None
        second = await svc.run("kb_async_state + 22")
        assert [r.text for r in second.results] == ["42"]
        assert second.results[0].is_main_result is True
        assert second.text == "42"
        generation = second.context["generation"] if second.context else None
        assert isinstance(generation, int) and generation >= 1
        assert second.context == {"sandbox_id": svc.sandbox_id, "context_id": "default-python",
                                  "language": "python", "generation": generation}
        assert second.execution_count is not None and second.execution_count >= 2

    arun(daemon, body)


def test_run_error_result(daemon):
    async def body(svc):
        result = await svc.run("def f():\n    return 1 / 0\nf()", strip_ansi=True)
        assert result.process.reason is WaitReason.EXITED
        assert result.process.exit_code == 1
        assert isinstance(result.error, InterpreterError)
        assert result.error.name == "ZeroDivisionError"
        assert "division by zero" in result.error.value
        assert result.error.traceback and isinstance(result.error.traceback[0], str)
        assert not any("\x1b[" in line for line in result.error.traceback)
        coloured = await svc.run("1/0")
        assert any("\x1b[" in line for line in coloured.error.traceback)

    arun(daemon, body)


def test_rich_outputs(daemon):
    async def body(svc):
        result = await svc.run(RICH_CODE)
        assert result.error is None, result.error
        html, svg, js, img, main = result.results
        assert html.html == "<b>bold</b>" and html.is_main_result is False
        assert svg.svg is not None and svg.svg.startswith("<svg")
        assert js.json == {"a": 1, "b": [1, 2]}
        assert base64.b64decode(img.png) == tiny_png()
        assert main.is_main_result and main.text == "42"
        assert all("text/plain" in r.data for r in result.results)

    arun(daemon, body)


def test_display_update_replaces_entry(daemon):
    async def body(svc):
        seen = []
        result = await svc.run(
            "from IPython.display import display, HTML\n"
            "h = display(HTML('<i>first</i>'), display_id=True)\n"
            "h.update(HTML('<i>second</i>'))\n",
            on_display=seen.append)
        assert len(result.results) == 1
        assert result.results[0].html == "<i>second</i>"
        assert result.results[0].display_id
        htmls = [d.data for d in seen if d.mime == "text/html"]
        assert htmls == ["<i>first</i>", "<i>second</i>"]

    arun(daemon, body)


CALLBACK_CODE = """
import sys, time
print('out1', flush=True)
time.sleep(0.2)
sys.stderr.write('err1\\n'); sys.stderr.flush()
time.sleep(0.2)
from IPython.display import display, HTML
display(HTML('<i>d1</i>'))
time.sleep(0.2)
print('out2', flush=True)
time.sleep(0.2)
raise ValueError('boom')
"""


def test_callbacks_in_order_plain(daemon):
    async def body(svc):
        events = []
        result = await svc.run(
            CALLBACK_CODE,
            on_stdout=lambda t: events.append(("stdout", t)),
            on_stderr=lambda t: events.append(("stderr", t)),
            on_display=lambda d: events.append(("display", d)),
            on_error=lambda e: events.append(("error", e)))
        assert merge_kinds(events) == ["stdout", "stderr", "display", "stdout", "error"]
        assert "".join(t for k, t in events if k == "stdout") == "out1\nout2\n" == result.logs.stdout
        assert "".join(t for k, t in events if k == "stderr") == "err1\n" == result.logs.stderr
        displays = [d for k, d in events if k == "display"]
        assert all(isinstance(d, InterpreterDisplay) for d in displays)
        assert InterpreterDisplay("text/html", "<i>d1</i>") in displays
        (error,) = [e for k, e in events if k == "error"]
        assert error == result.error and error.name == "ValueError" and error.value == "boom"

    arun(daemon, body)


def test_async_callbacks_are_awaited_in_order(daemon):
    async def body(svc):
        trace = []

        def plain(kind):
            return lambda payload: trace.append(("call", kind))

        def slow(kind):
            async def callback(payload):
                trace.append(("begin", kind))
                await asyncio.sleep(0.05)
                trace.append(("end", kind))
            return callback

        result = await svc.run(CALLBACK_CODE, on_stdout=slow("stdout"), on_stderr=plain("stderr"),
                               on_display=slow("display"), on_error=slow("error"))
        assert result.error is not None
        # every async callback finished before the next event was handled
        for i, (step, kind) in enumerate(trace):
            if step == "begin":
                assert trace[i + 1] == ("end", kind), trace
        order = [kind for step, kind in trace if step in ("begin", "call")]
        assert merge_kinds([(k, None) for k in order]) == ["stdout", "stderr", "display", "stdout", "error"]

    arun(daemon, body)


def test_callback_exception_propagates(daemon):
    async def body(svc):
        def boom(_text):
            raise RuntimeError("from the callback")

        with pytest.raises(RuntimeError, match="from the callback"):
            await svc.run("print('x')", on_stdout=boom)
        # the service stays usable
        assert (await svc.run("1 + 1")).text == "2"

    arun(daemon, body)


def test_create_context_with_cwd_env_and_handle_run(daemon, tmp_path, new_id):
    async def body(svc):
        cid = new_id("acreate")
        ctx = await svc.create_context(language="python", context_id=cid, cwd=str(tmp_path),
                                       env={"KBT_CTX": "ctx-value"}, request_timeout=60)
        try:
            assert isinstance(ctx, AsyncInterpreterContext)
            assert (ctx.sandbox_id, ctx.context_id, ctx.language) == (svc.sandbox_id, cid, "python")
            result = await ctx.run("import os; print(os.getcwd()); print(os.environ['KBT_CTX'])")
            assert result.logs.stdout == f"{tmp_path}\nctx-value\n"
            await ctx.run("y = 5")
            assert (await ctx.run("y * 3")).text == "15"
            # contexts do not share state with the default one
            assert (await svc.run("'y' in globals() and y == 5")).text == "False"
            generated = await svc.create_context(language="python")
            assert generated.context_id.startswith("ctx_")
            await generated.close()
        finally:
            await ctx.close()

    arun(daemon, body)


def test_per_run_cwd_env_are_restored(daemon, tmp_path, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("aperrun"))
        try:
            before = await ctx.run("import os; print(os.getcwd())")
            during = await ctx.run("import os; print(os.getcwd()); print(os.environ.get('KBT_RUN'))",
                                   cwd=str(tmp_path), env={"KBT_RUN": "on"})
            assert during.logs.stdout == f"{tmp_path}\non\n"
            after = await ctx.run("import os; print(os.getcwd()); print(os.environ.get('KBT_RUN'))")
            assert after.logs.stdout == before.logs.stdout + "None\n"
            on_default = await svc.run("import os; print(os.environ.get('KBT_DEF'))", env={"KBT_DEF": "d"})
            assert on_default.logs.stdout == "d\n"
        finally:
            await ctx.close()

    arun(daemon, body)


def test_connect_context_builds_handle_without_round_trip(daemon, new_id):
    async def body(svc):
        missing = new_id("never")
        handle = svc.connect_context(missing, language="python")
        assert (handle.sandbox_id, handle.context_id, handle.language) == (svc.sandbox_id, missing, "python")
        with pytest.raises(kernelbridge.SessionNotFoundError) as info:
            await handle.run("1")
        assert info.value.status == 404 and info.value.code == "SESSION_NOT_FOUND"

        assert svc.connect_context("default-python").language == "python"
        as_json = {"sandbox_id": svc.sandbox_id, "context_id": missing, "language": "python"}
        assert svc.connect_context(as_json) == handle
        assert svc.connect_context(handle) == handle
        with pytest.raises(ValueError):
            svc.connect_context({**as_json, "sandbox_id": "sb_elsewhere"})
        with pytest.raises(ValueError):
            svc.connect_context(AsyncInterpreterContext("sb_elsewhere", missing, "python"))
        with pytest.raises(ValueError):
            svc.connect_context(handle, language="r")
        with pytest.raises(ValueError):
            svc.connect_context(as_json, language="julia")
        with pytest.raises(ValueError):
            svc.connect_context("bad id!", language="python")

    arun(daemon, body)


def test_get_context_asks_daemon(daemon, new_id):
    async def body(svc):
        cid = new_id("aget")
        created = await svc.create_context(language="python", context_id=cid)
        try:
            got = await svc.get_context(cid)
            assert got == created
            assert await svc.get_context(created.to_json()) == created
            assert await svc.get_context(created, language="python") == created
            with pytest.raises(ValueError):
                await svc.get_context(cid, language="r")
            with pytest.raises(ValueError):
                await svc.get_context({**created.to_json(), "sandbox_id": "sb_other"})
            await got.run("z = 1")
            assert (await created.run("z")).text == "1"
            with pytest.raises(kernelbridge.SessionNotFoundError):
                await svc.get_context(new_id("missing"))
        finally:
            await created.close()

    arun(daemon, body)


def test_list_and_delete_contexts(daemon, new_id):
    async def body(svc):
        await svc.run("1")  # the default context exists now
        a = await svc.create_context(language="python", context_id=new_id("alist"))
        b = await svc.create_context(language="python", context_id=new_id("alist"))
        c = await svc.create_context(language="python", context_id=new_id("alist"))
        listed = await svc.list_contexts()
        ids = {h.context_id for h in listed}
        assert {a.context_id, b.context_id, c.context_id} <= ids
        assert "default-python" not in ids
        assert all(isinstance(h, AsyncInterpreterContext) and h.sandbox_id == svc.sandbox_id for h in listed)
        # a listed handle is bound: it runs
        (listed_a,) = [h for h in listed if h.context_id == a.context_id]
        assert (await listed_a.run("3")).text == "3"
        await svc.delete_context(a)                    # by handle
        await svc.delete_context(b.context_id)         # by id
        await svc.delete_context(c.to_json())          # by JSON
        ids = {h.context_id for h in await svc.list_contexts()}
        assert not ids & {a.context_id, b.context_id, c.context_id}
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await svc.delete_context(a)
        with pytest.raises(kernelbridge.ProtectedContextError) as info:
            await svc.delete_context("default-python")
        assert info.value.status == 400
        with pytest.raises(ValueError):
            await svc.delete_context(AsyncInterpreterContext("sb_other", "x", "python"))

    arun(daemon, body)


def test_close_then_run_raises_session_not_found(daemon, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("aclose"))
        await ctx.close()
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await ctx.run("1")
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await ctx.close()

    arun(daemon, body)


def test_unbound_handle_refuses_to_run(daemon):
    async def body(svc):
        handle = AsyncInterpreterContext(svc.sandbox_id, "default-python", "python")
        with pytest.raises(RuntimeError):
            await handle.run("1")
        # the service still accepts it as a context to run in
        assert (await svc.run("2", context=handle)).text == "2"
        bound = handle.bind(lambda code, cwd, env, timeout: svc.run(code, context=handle),
                            lambda: asyncio.sleep(0))
        assert bound == handle and (await bound.run("4")).text == "4"

    arun(daemon, body)


def test_isolated_runs(daemon, tmp_path):
    async def body(svc):
        await svc.run("kb_iso_marker = 1")
        iso = await svc.run("print('kb_iso_marker' in globals()); import os; print(os.getcwd())",
                            isolated=True, cwd=str(tmp_path))
        assert iso.logs.stdout == f"False\n{tmp_path}\n"
        assert iso.process.reason is WaitReason.EXITED
        assert (await svc.run("kb_iso_marker")).text == "1"
        with pytest.raises(kernelbridge.BadRequestError):
            await svc.run("1", isolated=True, context=svc.connect_context("default-python"))

    arun(daemon, body)


def test_run_timeout_and_unbounded(daemon, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("atimeout"))
        try:
            result = await ctx.run("import time\nprint('sleeping', flush=True)\ntime.sleep(30)", timeout=1)
            assert result.process.reason is WaitReason.TIMED_OUT
            assert result.process.signal == "SIGINT" and result.process.exit_code is None
            assert result.error is not None and result.error.name == "TimeoutError"
            assert result.logs.stdout == "sleeping\n"
            # interrupted in time: the context keeps its state and runs on
            assert (await ctx.run("'still here'")).text == "'still here'"
            unbounded = await ctx.run("import time; time.sleep(1.5); 'done'", timeout=0)
            assert unbounded.process.reason is WaitReason.EXITED and unbounded.text == "'done'"
        finally:
            await ctx.close()

    arun(daemon, body)


def test_vanished_context_surfaces_session_not_found(daemon, new_id):
    async def body(svc):
        cid = new_id("avanish")
        ctx = await svc.create_context(language="python", context_id=cid)
        died = await ctx.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
        assert died.process.reason is WaitReason.FAILED
        assert died.process.signal == "SIGKILL"
        assert died.error is not None and died.error.name == "KernelDied"
        with pytest.raises(kernelbridge.SessionNotFoundError) as vanished:
            await ctx.run("1")
        with pytest.raises(kernelbridge.SessionNotFoundError) as never:
            await svc.connect_context(new_id("never")).run("1")
        assert vanished.value.message != never.value.message  # it says when and why
        # the caller decides to recreate it, under the same id
        again = await svc.create_context(language="python", context_id=cid)
        assert (await again.run("'fresh'")).text == "'fresh'"
        await again.close()

    arun(daemon, body)


def test_process_handle_replays_logs_after_the_run(daemon):
    async def body(svc):
        result = await svc.run("import sys\nfor i in range(3):\n    print('line', i, flush=True)\n"
                               "    sys.stderr.write(f'e{i}\\n'); sys.stderr.flush()\n")
        handle = svc.process(result.process.process_id)
        frames = [f async for f in handle.logs()]
        out = [f for f in frames if f.channel in ("stdout", "stderr")]
        assert "".join(f.data for f in out if f.channel == "stdout") == result.logs.stdout
        assert "".join(f.data for f in out if f.channel == "stderr") == result.logs.stderr
        cursors = [f.cursor for f in frames]
        assert cursors == list(range(cursors[0], cursors[0] + len(cursors)))
        assert all(f.timestamp for f in frames)
        tail = [f async for f in handle.logs(cursor=frames[2].cursor)]
        assert tail == frames[2:]
        followed = [f async for f in handle.logs(follow=True)]
        assert followed == frames
        status = await handle.wait()
        assert status.state == "terminal" and status.reason is WaitReason.EXITED and status.exit_code == 0
        again = await handle.result()
        assert again.process == result.process and again.logs == result.logs
        info = await handle.info()
        assert info.state == "terminal" and info.context_id == "default-python" and info.kind == "code"
        assert result.process.process_id in {p.process_id for p in await svc.processes.list()}
        return result.process.process_id

    process_id = arun(daemon, body)

    async def rehydrated(svc):
        # another service (another worker) replays the same record by id
        handle = svc.process(process_id)
        frames = [f async for f in handle.logs()]
        assert any(f.channel == "stdout" and f.data.startswith("line 0") for f in frames)
        assert (await handle.wait(timeout=1)).state == "terminal"
        await handle.delete()
        with pytest.raises(kernelbridge.ProcessNotFoundError):
            await handle.info()

    arun(daemon, rehydrated)


def test_process_follow_wait_and_sigint_while_running(daemon, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("asigint"))
        started = asyncio.Event()

        def on_stdout(text):
            if "started" in text:
                started.set()

        try:
            run = asyncio.create_task(ctx.run(
                "import time\nprint('started', flush=True)\nfor i in range(600):\n    time.sleep(0.05)\n",
                on_stdout=on_stdout))
            await asyncio.wait_for(started.wait(), 30)
            handle = await running_process_async(svc, ctx.context_id)
            waited = await handle.wait(timeout=0.2)
            assert waited.state == "running" and waited.reason is None and waited.exit_code is None
            with pytest.raises(kernelbridge.ProcessRunningError) as info:
                await handle.result()
            assert info.value.status == 409
            with pytest.raises(kernelbridge.ProcessRunningError):
                await handle.delete()
            follower = asyncio.create_task(_collect(handle.logs(follow=True)))
            await asyncio.sleep(0.2)
            await handle.kill("SIGINT")
            result = await asyncio.wait_for(run, 30)
            assert result.process.reason is WaitReason.SIGNALED
            assert result.process.signal == "SIGINT"
            assert result.error is not None and result.error.name == "KeyboardInterrupt"
            frames = await asyncio.wait_for(follower, 30)
            assert "started\n" in "".join(f.data for f in frames if f.channel == "stdout")
            assert (await handle.wait()).reason is WaitReason.SIGNALED
            assert (await ctx.run("'alive'")).text == "'alive'"
        finally:
            await ctx.close()

    arun(daemon, body)


def test_process_sigkill_makes_context_vanish(daemon, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("akill"))
        started = asyncio.Event()
        run = asyncio.create_task(ctx.run("import time\nprint('started', flush=True)\ntime.sleep(60)",
                                          on_stdout=lambda t: started.set()))
        await asyncio.wait_for(started.wait(), 30)
        handle = await running_process_async(svc, ctx.context_id)
        await handle.kill()  # SIGKILL by default
        result = await asyncio.wait_for(run, 30)
        assert result.process.reason is WaitReason.SIGNALED
        assert result.process.signal == "SIGKILL"
        assert result.error is not None and result.error.name == "KernelKilled"
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await ctx.run("1")
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await svc.get_context(ctx.context_id)

    arun(daemon, body)


async def _collect(agen):
    return [item async for item in agen]


def test_code_with_nul_is_bad_request(daemon):
    async def body(svc):
        with pytest.raises(kernelbridge.BadRequestError) as info:
            await svc.run("print('a\x00b')")
        assert info.value.status == 400 and info.value.code == "BAD_REQUEST"

    arun(daemon, body)


def test_unsupported_option_for_language_without_adapter(daemon, tmp_path, new_id):
    async def body(svc):
        ctx = await svc.create_context(language=PLAIN_LANGUAGE, context_id=new_id("aplain"))
        try:
            assert ctx.language == PLAIN_LANGUAGE
            assert (await ctx.run("1 + 1")).text == "2"
            with pytest.raises(kernelbridge.UnsupportedOptionError) as info:
                await ctx.run("1", cwd=str(tmp_path))
            assert info.value.status == 400
        finally:
            await ctx.close()

    arun(daemon, body)


def test_handle_json_roundtrip_between_async_services(daemon, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("ajson"))
        await ctx.run("shared = 'from the first service'")
        text = json.dumps(ctx.to_json())
        other = await kernelbridge.connect_async(daemon.url, daemon.token)
        try:
            again = other.connect_context(json.loads(text))
            assert again == ctx
            assert (await again.run("shared")).text == "'from the first service'"
            await again.close()
        finally:
            await other.aclose()
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await ctx.run("1")

    arun(daemon, body)


def test_concurrent_runs_on_one_async_service(daemon, new_id):
    async def body(svc):
        contexts = [await svc.create_context(language="python", context_id=new_id("apar")) for _ in range(3)]
        try:
            results = await asyncio.gather(*[
                c.run(f"import time; time.sleep(0.5); {i} * 10") for i, c in enumerate(contexts)])
            assert [r.text for r in results] == ["0", "10", "20"]
        finally:
            for c in contexts:
                await c.close()

    arun(daemon, body)


def test_run_after_a_failed_run_is_not_aborted(daemon, new_id):
    """Runs on a context are independent: an error (or an interrupt) in one
    run must not abort the next one queued behind it."""

    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("anoabort"))
        try:
            for i in range(10):
                failed = await ctx.run("1 / 0")
                assert failed.error is not None and failed.error.name == "ZeroDivisionError"
                after = await ctx.run(f"{i} + 1")
                assert after.error is None, (i, after.error)
                assert after.text == str(i + 1)
        finally:
            await ctx.close()

    arun(daemon, body)


def test_timeout_with_interrupt_ignored_kills_and_vanishes(daemon, new_id):
    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id("ahard"))
        result = await ctx.run("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                               "time.sleep(60)", timeout=1)
        assert result.process.reason is WaitReason.TIMED_OUT
        assert result.process.signal == "SIGKILL"
        assert result.process.raw_reason
        assert result.error is not None and result.error.name == "TimeoutError"
        with pytest.raises(kernelbridge.SessionNotFoundError):
            await ctx.run("1")

    arun(daemon, body)


def test_limits_and_resources(daemon, new_id):
    limit = 512 << 20

    async def body(svc):
        ctx = await svc.create_context(language="python", context_id=new_id(), memory_limit=limit,
                                       pids_limit=32)
        assert (ctx.memory_limit, ctx.pids_limit) == (limit, 32)
        assert ctx.resources is not None and ctx.resources.memory_bytes > 0 and ctx.resources.pids >= 1
        busy = await ctx.run(
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass")
        assert busy.resources is not None
        assert busy.resources.cpu_time_s >= 0.45 and busy.resources.wall_time_s >= 0.45
        assert busy.resources.peak_memory_bytes and busy.resources.peak_memory_bytes < limit
        record = await svc.process(busy.process.process_id).info()
        assert record.resources == busy.resources
        oom = await ctx.run("b'x' * 2**31")
        assert oom.error is not None and oom.error.name == "MemoryError"
        assert oom.process.reason is WaitReason.EXITED
        many = await svc.run("import subprocess, time\n"
                             "ps = [subprocess.Popen(['sleep', '30']) for _ in range(30)]\n"
                             "time.sleep(10)", isolated=True, pids_limit=8)
        assert many.process.reason is WaitReason.PIDS_LIMIT
        assert many.error is not None and many.error.name == "PidsLimitExceeded"
        plain = await svc.create_context(language="python", context_id=new_id())
        assert plain.memory_limit is None and plain.pids_limit is None
        with pytest.raises(kernelbridge.BadRequestError):
            await svc.create_context(language="python", memory_limit=1000)
        await plain.close()
        await ctx.close()

    arun(daemon, body)
