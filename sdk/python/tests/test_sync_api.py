"""The blocking API (InterpreterService / InterpreterContext) against a real daemon."""

from __future__ import annotations

import json
import threading
import time

import pytest

import kernelbridge
from kernelbridge import InterpreterContext, InterpreterDisplay, WaitReason

from .kbsdk_testlib import merge_kinds, RICH_CODE, running_process


def test_aliases():
    assert kernelbridge.SyncInterpreterService is kernelbridge.InterpreterService
    assert kernelbridge.SyncInterpreterContext is kernelbridge.InterpreterContext


def test_connect_reads_environment(daemon, monkeypatch):
    monkeypatch.setenv("KB_URL", daemon.url)
    monkeypatch.setenv("KB_TOKEN", daemon.token)
    with kernelbridge.connect() as svc:
        assert svc.sandbox_id == svc.health()["sandbox_id"]
        assert isinstance(svc.list_contexts(), list)  # authorised with KB_TOKEN


def test_run_and_results(kb):
    result = kb.run("print('sync'); 3 * 3")
    assert result.logs.stdout == "sync\n" and result.text == "9"
    assert result.process.reason is WaitReason.EXITED and result.process.exit_code == 0
    rich = kb.run(RICH_CODE)
    assert [r.is_main_result for r in rich.results] == [False, False, False, False, True]
    assert rich.results[0].html == "<b>bold</b>" and rich.results[2].json == {"a": 1, "b": [1, 2]}
    err = kb.run("raise KeyError('k')")
    assert err.error.name == "KeyError" and err.process.exit_code == 1


def test_callbacks_run_in_caller_thread_in_order(kb):
    events = []
    caller = threading.get_ident()

    def record(kind):
        def callback(payload):
            assert threading.get_ident() == caller
            events.append((kind, payload))
        return callback

    async def async_display(display):  # async callbacks are accepted by the sync API too
        events.append(("display", display))

    result = kb.run(
        "import sys, time\nprint('a', flush=True)\ntime.sleep(0.2)\nsys.stderr.write('b\\n'); sys.stderr.flush()\n"
        "time.sleep(0.2)\nfrom IPython.display import display, Markdown\ndisplay(Markdown('*m*'))\n"
        "time.sleep(0.2)\n1/0",
        on_stdout=record("stdout"), on_stderr=record("stderr"), on_display=async_display,
        on_error=record("error"))
    assert merge_kinds(events) == ["stdout", "stderr", "display", "error"]
    assert InterpreterDisplay("text/markdown", "*m*") in [p for k, p in events if k == "display"]
    assert events[-1][1] == result.error


def test_callback_exception_propagates_to_caller(kb):
    with pytest.raises(ZeroDivisionError):
        kb.run("print('x')", on_stdout=lambda t: 1 / 0)
    assert kb.run("'ok'").text == "'ok'"


def test_context_lifecycle(kb, tmp_path, new_id):
    cid = new_id("screate")
    ctx = kb.create_context(language="python", context_id=cid, cwd=str(tmp_path), env={"KBT_S": "s"},
                            request_timeout=60)
    assert isinstance(ctx, InterpreterContext)
    assert (ctx.sandbox_id, ctx.context_id, ctx.language) == (kb.sandbox_id, cid, "python")
    assert ctx.run("import os; print(os.getcwd(), os.environ['KBT_S'])").logs.stdout == f"{tmp_path} s\n"
    seen = []
    ctx.run("v = 7\nprint(v)", on_stdout=seen.append)
    assert seen == ["7\n"]
    per_run = ctx.run("import os; print(os.environ.get('KBT_R'))", env={"KBT_R": "r"}, timeout=30)
    assert per_run.logs.stdout == "r\n"
    assert kb.run("v * 2", context=ctx).text == "14"
    got = kb.get_context(cid)
    assert got == ctx and got.run("v").text == "7"
    assert kb.connect_context(cid) == ctx
    assert cid in {c.context_id for c in kb.list_contexts()}
    assert "default-python" not in {c.context_id for c in kb.list_contexts()}
    with pytest.raises(ValueError):
        kb.connect_context(ctx, language="r")
    with pytest.raises(ValueError):
        kb.get_context({"sandbox_id": "sb_other", "context_id": cid, "language": "python"})
    ctx.close()
    with pytest.raises(kernelbridge.SessionNotFoundError):
        ctx.run("1")
    with pytest.raises(kernelbridge.SessionNotFoundError):
        kb.get_context(cid)
    other = kb.create_context(language="python")
    kb.delete_context(other)
    third = kb.create_context(language="python")
    kb.delete_context(third.to_json())
    assert not {other.context_id, third.context_id} & {c.context_id for c in kb.list_contexts()}


def test_isolated_and_timeout(kb, new_id):
    kb.run("sync_iso = 1")
    assert kb.run("'sync_iso' in globals()", isolated=True).text == "False"
    assert kb.run("sync_iso").text == "1"
    ctx = kb.create_context(language="python", context_id=new_id("stimeout"))
    try:
        started = time.monotonic()
        result = ctx.run("import time; time.sleep(20)", timeout=1)
        assert time.monotonic() - started < 15
        assert result.process.reason is WaitReason.TIMED_OUT and result.error.name == "TimeoutError"
        assert ctx.run("'ok'", timeout=0).text == "'ok'"
    finally:
        ctx.close()


def test_handle_json_reconnected_from_second_service(daemon, kb, new_id):
    ctx = kb.create_context(language="python", context_id=new_id("sjson"))
    ctx.run("payload = {'n': 41}")
    stored = json.dumps(ctx.to_json())
    with kernelbridge.connect(daemon.url, daemon.token) as second:
        handle = second.connect_context(json.loads(stored))
        assert (handle.sandbox_id, handle.context_id, handle.language) == (
            ctx.sandbox_id, ctx.context_id, ctx.language)
        assert handle.run("payload['n'] + 1").text == "42"
        checked = second.get_context(json.loads(stored))
        assert checked == handle
        handle.close()
    with pytest.raises(kernelbridge.SessionNotFoundError):
        ctx.run("1")


def test_eight_threads_share_one_service(kb, new_id):
    errors = []
    outputs = {}
    barrier = threading.Barrier(8)

    def worker(n):
        try:
            barrier.wait()
            ctx = kb.create_context(language="python", context_id=new_id(f"thr{n}"))
            try:
                ctx.run(f"mine = {n}")
                lines = []
                for i in range(5):
                    r = ctx.run(f"print(mine, {i}); mine * 100 + {i}", on_stdout=lines.append)
                    assert r.text == str(n * 100 + i), r
                shared = kb.run(f"{n} + 1000")
                assert shared.text == str(n + 1000)
                outputs[n] = "".join(lines)
            finally:
                ctx.close()
        except BaseException as exc:  # noqa: BLE001 - collected and reported
            errors.append((n, exc))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert sorted(outputs) == list(range(8))
    for n, text in outputs.items():
        assert text == "".join(f"{n} {i}\n" for i in range(5))


def test_process_handles_sync(daemon, kb, new_id):
    result = kb.run("for i in range(4):\n    print('frame', i, flush=True)")
    handle = kb.process(result.process.process_id)
    frames = list(handle.logs())
    assert "".join(f.data for f in frames if f.channel == "stdout") == result.logs.stdout
    assert list(handle.logs(cursor=frames[1].cursor)) == frames[1:]
    assert list(handle.logs(follow=True)) == frames
    assert handle.wait().reason is WaitReason.EXITED
    assert handle.result().logs == result.logs
    assert handle.info().process_id == result.process.process_id
    # a second client replays the record by its id after the run ended
    with kernelbridge.connect(daemon.url, daemon.token) as other:
        assert list(other.process(result.process.process_id).logs()) == frames

    ctx = kb.create_context(language="python", context_id=new_id("sproc"))
    try:
        box = {}
        started = threading.Event()

        def run():
            box["result"] = ctx.run("import time\nprint('up', flush=True)\ntime.sleep(60)",
                                    on_stdout=lambda t: started.set())

        t = threading.Thread(target=run)
        t.start()
        assert started.wait(30)
        running = running_process(kb, ctx.context_id)
        assert running.wait(timeout=0.1).running
        with pytest.raises(kernelbridge.ProcessRunningError):
            running.result()
        running.kill("SIGINT")
        t.join(30)
        assert box["result"].process.reason is WaitReason.SIGNALED
        assert box["result"].process.signal == "SIGINT"
        assert running.wait().state == "terminal"
        running.delete()
        with pytest.raises(kernelbridge.ProcessNotFoundError):
            running.info()
    finally:
        ctx.close()


def test_close_is_idempotent_and_final(daemon):
    svc = kernelbridge.connect(daemon.url, daemon.token)
    assert svc.run("1").text == "1"
    svc.close()
    svc.close()
    with pytest.raises(RuntimeError):
        svc.run("1")


def test_generation_tells_a_replaced_kernel(kb, daemon, new_id):
    import urllib.request

    ctx = kb.create_context(language="python", context_id=new_id())
    try:
        assert ctx.generation == 1
        ctx.run("kept = 1")
        result = ctx.run("kept")
        assert result.context is not None and result.context["generation"] == 1
        # The context's kernel is replaced behind the caller's back.
        request = urllib.request.Request(f"{daemon.url}/contexts/{ctx.context_id}/restart",
                                         method="POST", data=b"")
        if daemon.token:
            request.add_header("Authorization", f"Bearer {daemon.token}")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["generation"] == 2
        after = ctx.run("'kept' in globals()")
        assert after.text == "False" and after.context["generation"] == 2
        assert kb.get_context(ctx.context_id).generation == 2
        # A handle made without a round trip knows no generation, and the
        # generation is not part of a handle's identity.
        bare = kb.connect_context(ctx.context_id)
        assert bare.generation is None and bare == ctx and bare.to_json() == ctx.to_json()
    finally:
        ctx.close()
