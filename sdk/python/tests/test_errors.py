"""Every typed error of SPEC section 5, raised by both APIs from real daemon answers,
plus the transport's own errors (connection, request timeout)."""

from __future__ import annotations

import asyncio
import pickle
import socket
import time

import pytest

import kernelbridge
from kernelbridge import errors as kb_errors

from .kbsdk_testlib import arun, BROKEN_LANGUAGE, PLAIN_LANGUAGE, SLOW_LANGUAGE, start_daemon


def _assert_error(exc: kernelbridge.KernelBridgeError, cls: type, code: str, status: int) -> None:
    assert type(exc) is cls
    assert exc.code == code and exc.status == status
    assert exc.message
    assert exc.body.get("code") == code and exc.body.get("status_code") == status


def test_every_daemon_code_has_its_class():
    expected = {
        "BAD_REQUEST": kernelbridge.BadRequestError,
        "INVALID_REQUEST_BODY": kernelbridge.InvalidRequestBodyError,
        "UNAUTHORIZED": kernelbridge.UnauthorizedError,
        "SESSION_NOT_FOUND": kernelbridge.SessionNotFoundError,
        "PROCESS_NOT_FOUND": kernelbridge.ProcessNotFoundError,
        "LANGUAGE_NOT_SUPPORTED": kernelbridge.LanguageNotSupportedError,
        "NOT_FOUND": kernelbridge.NotFoundError,
        "METHOD_NOT_ALLOWED": kernelbridge.MethodNotAllowedError,
        "CONTEXT_EXISTS": kernelbridge.ContextExistsError,
        "PROTECTED_CONTEXT": kernelbridge.ProtectedContextError,
        "UNSUPPORTED_OPTION": kernelbridge.UnsupportedOptionError,
        "PROCESS_RUNNING": kernelbridge.ProcessRunningError,
        "KERNEL_START_FAILED": kernelbridge.KernelStartFailedError,
        "PAYLOAD_TOO_LARGE": kernelbridge.PayloadTooLargeError,
        "TOO_MANY_CONTEXTS": kernelbridge.TooManyContextsError,
        "UNAVAILABLE": kernelbridge.UnavailableError,
        "INTERNAL_ERROR": kernelbridge.InternalError,
        "URI_TOO_LONG": kernelbridge.UriTooLongError,
        "HEADERS_TOO_LARGE": kernelbridge.HeadersTooLargeError,
        "LIMIT_EXCEEDED": kernelbridge.LimitExceededError,
        "CHECKPOINT_NOT_FOUND": kernelbridge.CheckpointNotFoundError,
        "HTTP_VERSION_NOT_SUPPORTED": kernelbridge.HttpVersionNotSupportedError,
    }
    for code, cls in expected.items():
        body = {"code": code, "message": "m", "status_code": 500, "path": "/p", "method": "GET",
                "timestamp": "t"}
        err = kb_errors.error_from_response(500, body)
        assert type(err) is cls and issubclass(cls, kernelbridge.KernelBridgeError)
        assert (err.code, err.message, err.status, err.path, err.method) == (code, "m", 500, "/p", "GET")
    unknown = kb_errors.error_from_response(418, {"code": "TEAPOT", "message": "short and stout"})
    assert type(unknown) is kernelbridge.KernelBridgeError and unknown.code == "TEAPOT"
    not_json = kb_errors.error_from_response(502, "<html>bad gateway</html>")
    assert type(not_json) is kernelbridge.KernelBridgeError and not_json.status == 502


# INTERNAL_ERROR ("never for bad input") and UNAVAILABLE (only while the
# daemon drains) cannot be provoked on purpose; their mapping is checked above.


def test_session_not_found_both_apis(daemon, kb, new_id):
    missing = new_id("missing")
    with pytest.raises(kernelbridge.SessionNotFoundError) as info:
        kb.get_context(missing)
    _assert_error(info.value, kernelbridge.SessionNotFoundError, "SESSION_NOT_FOUND", 404)
    with pytest.raises(kernelbridge.SessionNotFoundError):
        kb.delete_context(missing)

    async def body(svc):
        with pytest.raises(kernelbridge.SessionNotFoundError) as info:
            await svc.run("1", context=svc.connect_context(missing))
        _assert_error(info.value, kernelbridge.SessionNotFoundError, "SESSION_NOT_FOUND", 404)

    arun(daemon, body)


def test_process_not_found_both_apis(daemon, kb):
    with pytest.raises(kernelbridge.ProcessNotFoundError) as info:
        kb.process("prc_0000000000000000").wait(timeout=0)
    _assert_error(info.value, kernelbridge.ProcessNotFoundError, "PROCESS_NOT_FOUND", 404)
    with pytest.raises(kernelbridge.ProcessNotFoundError):
        list(kb.process("prc_0000000000000000").logs())

    async def body(svc):
        for call in (lambda h: h.result(), lambda h: h.kill(), lambda h: h.info(), lambda h: h.delete()):
            with pytest.raises(kernelbridge.ProcessNotFoundError):
                await call(svc.process("prc_0000000000000000"))

    arun(daemon, body)


def test_language_not_supported_both_apis(daemon, kb):
    with pytest.raises(kernelbridge.LanguageNotSupportedError) as info:
        kb.create_context(language="cobol-kbtest")
    _assert_error(info.value, kernelbridge.LanguageNotSupportedError, "LANGUAGE_NOT_SUPPORTED", 404)
    assert "python" in info.value.message  # the message lists the installed kernelspecs

    async def body(svc):
        with pytest.raises(kernelbridge.LanguageNotSupportedError):
            await svc.run("1", language="cobol-kbtest")

    arun(daemon, body)


def test_context_exists_both_apis(daemon, kb, new_id):
    cid = new_id("exists")
    ctx = kb.create_context(language="python", context_id=cid)
    try:
        with pytest.raises(kernelbridge.ContextExistsError) as info:
            kb.create_context(language="python", context_id=cid)
        _assert_error(info.value, kernelbridge.ContextExistsError, "CONTEXT_EXISTS", 409)

        async def body(svc):
            with pytest.raises(kernelbridge.ContextExistsError):
                await svc.create_context(language="python", context_id=cid)

        arun(daemon, body)
    finally:
        ctx.close()


def test_bad_request_both_apis(daemon, kb):
    with pytest.raises(kernelbridge.BadRequestError) as info:
        kb.create_context(language="python", context_id="no spaces allowed")
    _assert_error(info.value, kernelbridge.BadRequestError, "BAD_REQUEST", 400)
    with pytest.raises(kernelbridge.BadRequestError):
        kb.run("1", isolated=True, context=kb.connect_context("default-python"))

    async def body(svc):
        with pytest.raises(kernelbridge.BadRequestError):
            await svc.create_context(language="python", context_id="x" * 65)
        with pytest.raises(kernelbridge.BadRequestError):
            await svc.process("prc_x").wait(timeout=-1)

    arun(daemon, body)


def test_invalid_request_body(daemon):
    async def body(svc):
        with pytest.raises(kernelbridge.InvalidRequestBodyError) as info:
            await svc.transport.request("POST", "/run", content=b'{"code": "1"')
        _assert_error(info.value, kernelbridge.InvalidRequestBodyError, "INVALID_REQUEST_BODY", 400)

    arun(daemon, body)


def test_not_found_and_method_not_allowed(daemon):
    async def body(svc):
        with pytest.raises(kernelbridge.NotFoundError) as info:
            await svc.transport.request("GET", "/no-such-route")
        assert info.value.status == 404
        with pytest.raises(kernelbridge.MethodNotAllowedError) as info:
            await svc.transport.request("PUT", "/contexts", body={})
        assert info.value.status == 405

    arun(daemon, body)


def test_unauthorized_both_apis(daemon):
    with kernelbridge.connect(daemon.url, "wrong-token") as bad:  # /health needs no token
        with pytest.raises(kernelbridge.UnauthorizedError) as info:
            bad.run("1")
        _assert_error(info.value, kernelbridge.UnauthorizedError, "UNAUTHORIZED", 401)
        with pytest.raises(kernelbridge.UnauthorizedError):
            bad.code_interpreter.list_contexts()
    with kernelbridge.connect(daemon.url, "") as anonymous:
        with pytest.raises(kernelbridge.UnauthorizedError):
            anonymous.list_contexts()

    async def body(svc):
        with pytest.raises(kernelbridge.UnauthorizedError):
            await svc.list_contexts()

    arun(daemon, body, token="wrong-token")


def test_protected_context_both_apis(daemon, kb):
    kb.run("1")
    with pytest.raises(kernelbridge.ProtectedContextError) as info:
        kb.delete_context("default-python")
    _assert_error(info.value, kernelbridge.ProtectedContextError, "PROTECTED_CONTEXT", 400)
    with pytest.raises(kernelbridge.ProtectedContextError):
        kb.code_interpreter.delete_context("default-python")

    async def body(svc):
        with pytest.raises(kernelbridge.ProtectedContextError):
            await svc.delete_context(svc.connect_context("default-python"))
        with pytest.raises(kernelbridge.ProtectedContextError):
            await svc.code_interpreter.delete_context("default-python")

    arun(daemon, body)


def test_kernel_start_failed_carries_stderr(daemon, kb):
    with pytest.raises(kernelbridge.KernelStartFailedError) as info:
        kb.create_context(language=BROKEN_LANGUAGE)
    _assert_error(info.value, kernelbridge.KernelStartFailedError, "KERNEL_START_FAILED", 503)
    assert "refusing to start" in info.value.message

    async def body(svc):
        with pytest.raises(kernelbridge.KernelStartFailedError):
            await svc.create_context(language=BROKEN_LANGUAGE)
        with pytest.raises(kernelbridge.KernelStartFailedError):
            await svc.run("1", language=BROKEN_LANGUAGE)

    arun(daemon, body)


def test_unsupported_option_sync(kb, tmp_path):
    ctx = kb.create_context(language=PLAIN_LANGUAGE)
    try:
        with pytest.raises(kernelbridge.UnsupportedOptionError) as info:
            ctx.run("1", env={"A": "b"})
        _assert_error(info.value, kernelbridge.UnsupportedOptionError, "UNSUPPORTED_OPTION", 400)
        assert ctx.run("2").text == "2"
    finally:
        ctx.close()


def test_request_timeout_raises_timeout_error(daemon, kb):
    # This language's kernel starts 3 s late (and has no warm pool): the
    # answer cannot come before the client's timer, even on a machine so
    # loaded that the client's event loop looks at both at once (it took
    # the answer first once, with an ipykernel that started in under 1 s).
    with pytest.raises(kernelbridge.KernelBridgeTimeoutError) as info:
        kb.create_context(language=SLOW_LANGUAGE, request_timeout=0.001)
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, kernelbridge.KernelBridgeError)
    # Take the warm python kernel first, so that the next create starts cold.
    warm = kb.create_context(language="python")
    try:
        with pytest.raises(kernelbridge.KernelBridgeTimeoutError):
            kb.code_interpreter.create_context(request_timeout=0.001)
    finally:
        warm.close()
    # the client stays usable afterwards
    assert kb.run("5").text == "5"


def test_request_timeout_that_runs_out_as_the_connection_is_made(daemon, monkeypatch):
    # The timer runs out in the same turn of the event loop in which the
    # connection is made (as a 1 ms timeout can on a busy machine). The
    # timeout must still be raised: an inner wait that gave the finished
    # connection back and dropped the cancellation let such a request run on
    # to its answer. Here the connection is made well within the timer (1 s),
    # then the loop is held past it before the connection is handed back.
    from kernelbridge import _transport

    real_open = asyncio.open_connection

    async def open_then_stall(*args, **kwargs):
        pair = await real_open(*args, **kwargs)
        time.sleep(1.2)  # blocks the loop past the request's timer
        return pair

    monkeypatch.setattr(asyncio, "open_connection", open_then_stall)

    async def body():
        transport = _transport.AsyncTransport(daemon.url, daemon.token)
        try:
            with pytest.raises(kernelbridge.KernelBridgeTimeoutError):
                await transport.request("GET", "/health", timeout=1.0)
            monkeypatch.setattr(asyncio, "open_connection", real_open)
            assert (await transport.request("GET", "/health", timeout=30))["status"] == "ok"
        finally:
            await transport.aclose()

    asyncio.run(body())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_errors(daemon):
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(kernelbridge.KernelBridgeConnectionError) as info:
        kernelbridge.connect(url)
    assert isinstance(info.value, ConnectionError)

    async def body():
        with pytest.raises(kernelbridge.KernelBridgeConnectionError):
            await kernelbridge.connect_async(url)

    asyncio.run(body())


def test_daemon_stopping_mid_run_and_after(tmp_path):
    d = start_daemon(tmp_path / "stopping")
    try:
        with kernelbridge.connect(d.url) as svc:
            assert svc.run("'warm'").text == "'warm'"
            started = []
            import threading

            outcome = {}

            def run():
                try:
                    outcome["result"] = svc.run("import time\nprint('go', flush=True)\ntime.sleep(60)",
                                                on_stdout=started.append)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    outcome["error"] = exc

            t = threading.Thread(target=run)
            t.start()
            deadline = time.monotonic() + 30
            while not started and time.monotonic() < deadline:
                time.sleep(0.05)
            assert started, "the run never printed"
            assert d.stop() == 0
            t.join(60)
            assert "error" not in outcome, outcome.get("error")
            result = outcome["result"]
            assert result.process.reason is kernelbridge.WaitReason.SANDBOX_STOPPED
            assert result.error is not None and result.error.name == "SandboxStopped"
            with pytest.raises(kernelbridge.KernelBridgeConnectionError) as info:
                svc.list_contexts()
            # connect() knows the sandbox: the error names it (a subclass, caught as before)
            assert type(info.value) is kernelbridge.SandboxUnavailable
            assert (info.value.sandbox_id, info.value.url) == (svc.sandbox_id, d.url)
    finally:
        d.stop()


def test_sandbox_unavailable_is_a_connection_error():
    err = kernelbridge.SandboxUnavailable("kb-1", "http://kb-1:8899", "refused")
    for cls in (kernelbridge.KernelBridgeConnectionError, kernelbridge.KernelBridgeError, ConnectionError):
        assert isinstance(err, cls)
    assert (err.code, err.status, err.sandbox_id, err.url, err.message) == \
        ("SANDBOX_UNAVAILABLE", None, "kb-1", "http://kb-1:8899", "refused")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is kernelbridge.SandboxUnavailable
    assert (again.sandbox_id, again.url, again.message, again.code) == (err.sandbox_id, err.url, "refused",
                                                                        "SANDBOX_UNAVAILABLE")
    assert "SandboxUnavailable" in kernelbridge.__all__ and "SandboxUnavailable" in kb_errors.__all__


def test_limits_too_many_contexts_and_payload_too_large(tmp_path):
    d = start_daemon(tmp_path / "limits", "--max-contexts", "1", "--max-body", "64K")
    try:
        with kernelbridge.connect(d.url) as svc:
            first = svc.create_context(language="python")
            with pytest.raises(kernelbridge.TooManyContextsError) as info:
                svc.create_context(language="python")
            _assert_error(info.value, kernelbridge.TooManyContextsError, "TOO_MANY_CONTEXTS", 429)

            async def too_many(asvc):
                with pytest.raises(kernelbridge.TooManyContextsError):
                    await asvc.create_context(language="python")

            arun(d, too_many)
            first.close()
            with pytest.raises(kernelbridge.PayloadTooLargeError) as info:
                svc.run("x = '" + "a" * (80 * 1024) + "'")
            assert info.value.status == 413 and info.value.code == "PAYLOAD_TOO_LARGE"

            async def body(asvc):
                with pytest.raises(kernelbridge.PayloadTooLargeError):
                    await asvc.create_context(language="python", env={"BIG": "b" * (80 * 1024)})

            arun(d, body)
    finally:
        assert d.stop() == 0


def test_client_survives_daemon_restart_on_same_port(tmp_path):
    """Kept-alive connections to a daemon that went away are replaced, not failed."""
    first = start_daemon(tmp_path / "restart")
    port = first.url.rsplit(":", 1)[1]
    svc = kernelbridge.connect(first.url)
    try:
        assert svc.run("'before'").text == "'before'"
        sandbox_id = svc.sandbox_id
        assert first.stop() == 0
        with pytest.raises(kernelbridge.KernelBridgeConnectionError):
            svc.list_contexts()
        second = start_daemon(tmp_path / "restart", "--listen", f"127.0.0.1:{port}")
        try:
            assert svc.health()["sandbox_id"] == sandbox_id  # kept in the state dir
            assert svc.run("'after'").text == "'after'"

            async def body(asvc):
                assert (await asvc.run("'async'")).text == "'async'"

            arun(second, body)
        finally:
            assert second.stop() == 0
    finally:
        svc.close()
