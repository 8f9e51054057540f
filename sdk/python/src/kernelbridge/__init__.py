"""kernelbridge: Python SDK for stateful code execution on real Jupyter kernels.

    import kernelbridge

    kb = kernelbridge.connect()            # KB_URL / KB_TOKEN from the environment
    print(kb.run("1 + 1").text)            # '2'
    ctx = kb.create_context(language="python")
    ctx.run("x = 41")
    print(ctx.run("x + 1").text)           # '42'
    ctx.close()

The async API (``await kernelbridge.connect_async()``) has the same methods.
Several daemons, routed by sandbox (SPEC section 12)::

    kb = kernelbridge.InterpreterService(sandboxes={"kb-0": url0, "kb-1": url1}, token=token)
    ctx = kb.create_context(language="python")   # on the sandbox with the fewest contexts
    ctx.sandbox_id                               # 'kb-1'; every call on ctx goes there

Layers, each importing only those before it: errors and _transport (HTTP,
SSE, typed errors); types (the models: results, contexts, processes, the
published API's names); the async service (_endpoints, process,
_async_code_interpreter, interpreter); the blocking service (_runner, the
event loop thread, and sync, generated from the async classes by
tools/gen_sync.py); code_interpreter and this module gather the names.
"""

from __future__ import annotations

import os
from typing import Optional

from ._transport import AsyncTransport, SSEEvent, fetch_json_sync
from ._version import __version__
from .code_interpreter import (
    AsyncCodeInterpreter,
    CodeInterpreter,
    CodeInterpreterContext,
    ExecutionError,
    ExecutionResult,
    OutputMessage,
)
from .errors import (
    BadRequestError,
    ContextExistsError,
    InternalError,
    InvalidRequestBodyError,
    KernelBridgeConnectionError,
    KernelBridgeError,
    KernelBridgeTimeoutError,
    KernelStartFailedError,
    LanguageNotSupportedError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    ProcessNotFoundError,
    ProcessRunningError,
    ProtectedContextError,
    SandboxUnavailable,
    SessionNotFoundError,
    TooManyContextsError,
    HeadersTooLargeError,
    LimitExceededError,
    CheckpointNotFoundError,
    HttpVersionNotSupportedError,
    UnauthorizedError,
    UnavailableError,
    UnsupportedOptionError,
    UriTooLongError,
)
from .interpreter import AsyncInterpreterService
from .process import AsyncProcessHandle, AsyncProcessService
from .sync import (
    InterpreterContext,
    InterpreterService,
    ProcessHandle,
    ProcessService,
    SyncBridge,
    SyncInterpreterContext,
    SyncInterpreterService,
)
from .types import (
    AsyncInterpreterContext,
    Checkpoint,
    ContextResources,
    ForkOrigin,
    InterpreterContextJSON,
    InterpreterDisplay,
    InterpreterError,
    InterpreterLogs,
    InterpreterOutput,
    InterpreterProcess,
    InterpreterResult,
    JsonObject,
    JsonValue,
    LogFrame,
    ProcessRecord,
    ProcessStatus,
    RestoreOrigin,
    RollbackPolicy,
    RunResources,
    WaitReason,
)

__all__ = [
    "__version__",
    "DEFAULT_URL",
    "connect",
    "connect_async",
    # async API
    "AsyncInterpreterService",
    "AsyncInterpreterContext",
    "AsyncProcessService",
    "AsyncProcessHandle",
    "AsyncTransport",
    "SSEEvent",
    # sync API
    "InterpreterService",
    "InterpreterContext",
    "SyncInterpreterService",
    "SyncInterpreterContext",
    "ProcessService",
    "ProcessHandle",
    "SyncBridge",
    # earlier-style API
    "CodeInterpreter",
    "AsyncCodeInterpreter",
    "CodeInterpreterContext",
    "OutputMessage",
    "ExecutionError",
    "ExecutionResult",
    # data
    "Checkpoint",
    "ContextResources",
    "ForkOrigin",
    "RestoreOrigin",
    "RollbackPolicy",
    "InterpreterContextJSON",
    "InterpreterDisplay",
    "InterpreterProcess",
    "InterpreterLogs",
    "InterpreterError",
    "InterpreterOutput",
    "InterpreterResult",
    "JsonObject",
    "JsonValue",
    "LogFrame",
    "ProcessRecord",
    "ProcessStatus",
    "RunResources",
    "WaitReason",
    # errors
    "KernelBridgeError",
    "KernelBridgeConnectionError",
    "KernelBridgeTimeoutError",
    "SandboxUnavailable",
    "BadRequestError",
    "InvalidRequestBodyError",
    "UnauthorizedError",
    "SessionNotFoundError",
    "ProcessNotFoundError",
    "LanguageNotSupportedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ContextExistsError",
    "ProtectedContextError",
    "UnsupportedOptionError",
    "ProcessRunningError",
    "KernelStartFailedError",
    "PayloadTooLargeError",
    "TooManyContextsError",
    "UnavailableError",
    "InternalError",
    "UriTooLongError",
    "HeadersTooLargeError",
    "LimitExceededError",
    "CheckpointNotFoundError",
    "HttpVersionNotSupportedError",
]

#: Where ``connect()`` looks when neither ``url`` nor ``KB_URL`` is given
#: (the daemon's default listen address).
DEFAULT_URL = "http://127.0.0.1:8899"


def _settings(url: Optional[str], token: Optional[str]) -> tuple[str, Optional[str]]:
    url = url or os.environ.get("KB_URL") or DEFAULT_URL
    if token is None:
        token = os.environ.get("KB_TOKEN") or None
    return url, token


def connect(url: Optional[str] = None, token: Optional[str] = None, *,
            connect_timeout: float = 10.0) -> InterpreterService:
    """A blocking client of the daemon at ``url`` (else ``KB_URL``, else DEFAULT_URL).

    ``token`` (else ``KB_TOKEN``) is sent as a bearer token. The sandbox id
    is read from ``/health``, so an unreachable daemon raises
    KernelBridgeConnectionError here. Close the service when done (or use it
    in a ``with`` block).
    """
    url, token = _settings(url, token)
    health = fetch_json_sync(url, "/health", token, timeout=connect_timeout)
    sandbox_id = _sandbox_id_of(health, url)
    transport = AsyncTransport(url, token, connect_timeout=connect_timeout, sandbox_id=sandbox_id)
    impl = AsyncInterpreterService(sandbox_id, transport, AsyncProcessService(transport))
    return InterpreterService(impl, SyncBridge())


async def connect_async(url: Optional[str] = None, token: Optional[str] = None, *,
                        connect_timeout: float = 10.0) -> AsyncInterpreterService:
    """An async client of the daemon at ``url`` (else ``KB_URL``, else DEFAULT_URL).

    ``token`` (else ``KB_TOKEN``) is sent as a bearer token; the sandbox id
    is read from ``/health``. Close it with ``await service.aclose()`` (or use
    ``async with``).
    """
    url, token = _settings(url, token)
    transport = AsyncTransport(url, token, connect_timeout=connect_timeout)
    try:
        health = await transport.request("GET", "/health", timeout=connect_timeout)
        sandbox_id = _sandbox_id_of(health, url)
    except BaseException:
        await transport.aclose()
        raise
    transport.sandbox_id = sandbox_id  # from now on an unreachable daemon is SandboxUnavailable
    return AsyncInterpreterService(sandbox_id, transport, AsyncProcessService(transport))


def _sandbox_id_of(health: object, url: str) -> str:
    if not isinstance(health, dict) or not isinstance(health.get("sandbox_id"), str):
        raise KernelBridgeError("INVALID_RESPONSE", f"{url}/health has no sandbox_id: {health!r}", None)
    sandbox_id: str = health["sandbox_id"]
    return sandbox_id
