"""The async service: AsyncInterpreterService, the contexts and runs of one daemon.

A run is one POST /run read as Server-Sent Events (see _endpoints), so
callbacks see stdout, stderr, displays and the error as the kernel produces
them, and the final ``result`` event gives the whole InterpreterResult. The
handles it returns are AsyncInterpreterContext (types) bound to it. The
blocking API (sync) is generated from this class; nothing here blocks.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple, Union

from . import _endpoints
from ._async_code_interpreter import AsyncCodeInterpreter
from ._transport import AsyncTransport
from .process import AsyncProcessHandle, AsyncProcessService
from .types import (
    AsyncInterpreterContext,
    ContextCloser,
    ContextRunner,
    DisplayCallback,
    ErrorCallback,
    InterpreterContextJSON,
    InterpreterResult,
    JsonObject,
    OutputCallback,
)

__all__ = [
    "AsyncInterpreterService",
    "AsyncInterpreterContext",
    "OutputCallback",
    "ErrorCallback",
    "DisplayCallback",
    "ContextRunner",
    "ContextCloser",
]

ContextRef = Union[str, AsyncInterpreterContext, InterpreterContextJSON, Mapping[str, Any]]


class AsyncInterpreterService:
    """Contexts and runs of one kernelbridge daemon (one sandbox), asynchronously."""

    def __init__(self, sandbox_id: str, transport: AsyncTransport, process: AsyncProcessService) -> None:
        self._sandbox_id = sandbox_id
        self._transport = transport
        self._processes = process

    def __repr__(self) -> str:
        return f"AsyncInterpreterService(sandbox_id={self._sandbox_id!r}, url={self._transport.url!r})"

    @property
    def sandbox_id(self) -> str:
        return self._sandbox_id

    @property
    def transport(self) -> AsyncTransport:
        return self._transport

    @property
    def processes(self) -> AsyncProcessService:
        """The process service (list of run records)."""
        return self._processes

    @property
    def code_interpreter(self) -> AsyncCodeInterpreter:
        """The earlier-style AsyncCodeInterpreter API over this service."""
        return AsyncCodeInterpreter(self)

    def process(self, process_id: str) -> AsyncProcessHandle:
        """A handle on one run's process record: logs, wait, kill, result."""
        return self._processes.process(process_id)

    async def health(self) -> JsonObject:
        """GET /health: status, version, sandbox_id, contexts, uptime_s."""
        health: JsonObject = await self._transport.request("GET", "/health")
        return health

    async def aclose(self) -> None:
        """Close the connections of this service."""
        await self._transport.aclose()

    async def __aenter__(self) -> "AsyncInterpreterService":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- handles -------------------------------------------------------------

    def _handle(self, obj: Mapping[str, Any], language: Optional[str] = None) -> AsyncInterpreterContext:
        return self._bind(AsyncInterpreterContext.from_json(obj, self._sandbox_id, language))

    def _bind(self, handle: AsyncInterpreterContext) -> AsyncInterpreterContext:
        async def runner(code: str, cwd: Optional[str], env: Optional[Mapping[str, str]],
                         timeout: Optional[float], **callbacks: Any) -> InterpreterResult:
            return await self.run(code, context=handle, cwd=cwd, env=env, timeout=timeout, **callbacks)

        async def closer() -> None:
            await self.delete_context(handle)

        return handle.bind(runner, closer)

    def _resolve(self, context: ContextRef, language: Optional[str]) -> Tuple[str, Optional[str]]:
        """(context_id, language or None) of a handle, its JSON or a bare id,
        checked against this sandbox and against ``language``."""
        if isinstance(context, AsyncInterpreterContext):
            sandbox_id, context_id, known = context.sandbox_id, context.context_id, context.language
        elif isinstance(context, Mapping):
            missing = [k for k in ("sandbox_id", "context_id", "language") if not isinstance(context.get(k), str)]
            if missing:
                raise ValueError(f"context JSON lacks string field(s) {', '.join(missing)}: {dict(context)!r}")
            sandbox_id, context_id, known = context["sandbox_id"], context["context_id"], context["language"]
        elif isinstance(context, str):
            sandbox_id, context_id, known = self._sandbox_id, context, None
        else:
            raise TypeError(f"a context is a handle, its JSON or a context id, not {type(context).__name__}")
        if sandbox_id != self._sandbox_id:
            raise ValueError(f"context {context_id!r} belongs to sandbox {sandbox_id!r}, "
                             f"not to this service's sandbox {self._sandbox_id!r}")
        _endpoints.check_context_id(context_id)
        if language is not None and known is not None and language != known:
            raise ValueError(f"context {context_id!r} is a {known!r} context, not {language!r}")
        return context_id, known if known is not None else language

    # -- contexts ------------------------------------------------------------

    async def create_context(self, *, language: str, context_id: Optional[str] = None, cwd: Optional[str] = None,
                             env: Optional[Mapping[str, str]] = None,
                             request_timeout: Optional[float] = None, memory_limit: Optional[int] = None,
                             pids_limit: Optional[int] = None) -> AsyncInterpreterContext:
        """Start a new context (a fresh kernel) and return its handle once the kernel is ready.

        ``cwd`` and ``env`` apply to the kernel process; ``memory_limit``
        (bytes) and ``pids_limit`` to its process tree (None: the daemon's
        defaults). A taken
        ``context_id`` raises ContextExistsError; an unknown language
        LanguageNotSupportedError; ``request_timeout`` (seconds) bounds the
        wait for the answer (KernelBridgeTimeoutError).
        """
        obj = await _endpoints.create_context(self._transport, language=language, context_id=context_id,
                                              cwd=cwd, env=env, request_timeout=request_timeout,
                                              memory_limit=memory_limit, pids_limit=pids_limit)
        return self._handle(obj, language)

    def connect_context(self, context: Union[str, AsyncInterpreterContext, InterpreterContextJSON], *,
                        language: Optional[str] = None) -> AsyncInterpreterContext:
        """A bound handle on an existing context, built without a round trip.

        ``context`` is a handle (maybe of another service object on the same
        sandbox), its JSON form, or a context id. A bare id takes ``language``,
        else the language in a ``default-<language>`` id, else ``"python"``.
        A handle of another sandbox, or a ``language`` that conflicts with the
        handle's, raises ValueError.
        """
        context_id, known = self._resolve(context, language)
        if known is None:
            known = context_id[len("default-"):] if context_id.startswith("default-") else "python"
        return self._bind(AsyncInterpreterContext(self._sandbox_id, context_id, known))

    async def get_context(self, context: Union[str, AsyncInterpreterContext, InterpreterContextJSON], *,
                          language: Optional[str] = None) -> AsyncInterpreterContext:
        """A bound handle on an existing context, checked with the daemon.

        A context that does not exist (or vanished) raises
        SessionNotFoundError; the other checks are those of connect_context,
        with the language the daemon reports.
        """
        context_id, known = self._resolve(context, language)
        obj = await _endpoints.get_context(self._transport, context_id)
        actual = str(obj.get("language") or "")
        if known is not None and actual and known != actual:
            raise ValueError(f"context {context_id!r} is a {actual!r} context, not {known!r}")
        return self._handle(obj, known)

    async def list_contexts(self) -> List[AsyncInterpreterContext]:
        """The contexts created by callers (default contexts are not listed)."""
        return [self._handle(obj) for obj in await _endpoints.list_contexts(self._transport)]

    async def delete_context(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str]) -> None:
        """Delete a context and shut its kernel down.

        Unknown contexts raise SessionNotFoundError; default contexts
        ProtectedContextError.
        """
        context_id, _ = self._resolve(context, None)
        await _endpoints.delete_context(self._transport, context_id)

    # -- runs ----------------------------------------------------------------

    async def run(self, code: str, *, language: str = "python", context: Optional[AsyncInterpreterContext] = None,
                  isolated: bool = False, timeout: Optional[float] = None, cwd: Optional[str] = None,
                  env: Optional[Mapping[str, str]] = None, on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None, on_error: Optional[ErrorCallback] = None,
                  on_display: Optional[DisplayCallback] = None, strip_ansi: bool = False,
                  memory_limit: Optional[int] = None, pids_limit: Optional[int] = None) -> InterpreterResult:
        """Execute code and return the parsed interpreter result.

        Without ``context`` the code runs in the default context of
        ``language``; ``isolated=True`` runs it in a fresh kernel destroyed
        afterwards, with ``memory_limit`` and ``pids_limit`` if given. A rehydrated kind='code' process handle can still replay
        logs and wait/kill, but it does not reconstruct this decomposed result
        on another worker. A vanished explicit context surfaces the daemon's
        typed SESSION_NOT_FOUND error; callers decide whether to recreate the
        context and what to rerun. timeout is the caller wait budget in
        seconds; 0 waits unbounded.

        Callbacks (plain or async functions) are called in order as the
        events stream in, async ones awaited before the next event:
        ``on_stdout(text)``, ``on_stderr(text)``, ``on_error(InterpreterError)``
        and ``on_display(InterpreterDisplay)`` once per MIME entry of each
        results entry (displays and the main result, in arrival order) and of
        each display update. An exception raised by a
        callback ends the call with that exception; the run itself goes on
        on the daemon, and its process record keeps the outcome.
        """
        context_id = self._resolve(context, None)[0] if context is not None else None
        body = _endpoints.run_body(code, language=language, context_id=context_id, isolated=isolated,
                                   timeout=timeout, cwd=cwd, env=env, strip_ansi=strip_ansi,
                                   memory_limit=memory_limit, pids_limit=pids_limit)
        return await _endpoints.run(self._transport, body, on_stdout=on_stdout, on_stderr=on_stderr,
                                    on_error=on_error, on_display=on_display)
