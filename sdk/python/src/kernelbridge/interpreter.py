"""The async interpreter API: AsyncInterpreterService and AsyncInterpreterContext.

A run is one POST /run read as Server-Sent Events, so callbacks see stdout,
stderr, displays and the error as the kernel produces them, and the final
``result`` event gives the whole InterpreterResult.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Self,
    Tuple,
    Union,
)

from ._transport import AsyncTransport, Response, quote_segment
from .errors import KernelBridgeConnectionError, KernelBridgeError
from .process import AsyncProcessHandle, AsyncProcessService
from .types import (
    ContextResources,
    InterpreterContextJSON,
    InterpreterDisplay,
    InterpreterError,
    InterpreterResult,
    JsonObject,
    displays_of,
)

if TYPE_CHECKING:
    from .code_interpreter import AsyncCodeInterpreter

__all__ = [
    "AsyncInterpreterService",
    "AsyncInterpreterContext",
    "OutputCallback",
    "ErrorCallback",
    "DisplayCallback",
    "ContextRunner",
    "ContextCloser",
]

OutputCallback = Callable[[str], Union[None, Awaitable[None]]]
ErrorCallback = Callable[[InterpreterError], Union[None, Awaitable[None]]]
DisplayCallback = Callable[[InterpreterDisplay], Union[None, Awaitable[None]]]
ContextRunner = Callable[[str, Optional[str], Optional[Mapping[str, str]], Optional[float]],
                         Awaitable[InterpreterResult]]
ContextCloser = Callable[[], Awaitable[None]]

_CONTEXT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# How long to wait, after the final `result` event, for the stream's end so
# the connection can be kept; a daemon that keeps the stream open costs a
# reconnect, never a hang.
_DRAIN_AFTER_RESULT = 2.0


def _callbacks(on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
               on_error: Optional[ErrorCallback], on_display: Optional[DisplayCallback]) -> Dict[str, Any]:
    given = {"on_stdout": on_stdout, "on_stderr": on_stderr, "on_error": on_error, "on_display": on_display}
    return {k: v for k, v in given.items() if v is not None}


async def _call(callback: Optional[Callable[[Any], Any]], arg: Any) -> None:
    if callback is None:
        return
    outcome = callback(arg)
    if inspect.isawaitable(outcome):
        await outcome


@dataclass(frozen=True)
class AsyncInterpreterContext:
    """Serializable interpreter context handle.

    Only ``sandbox_id``, ``context_id`` and ``language`` are part of the
    handle (its JSON form is :meth:`to_json`); a handle built by a service is
    bound to it, so :meth:`run` and :meth:`close` work on it directly.
    ``generation`` is the context's generation as the daemon last reported
    it (None for a handle built without a round trip): compare it with a
    result's ``context["generation"]`` or a fresh :meth:`get_context` to
    know whether the kernel, and so its state, was replaced. ``memory_limit``
    (bytes) and ``pids_limit`` are the context's limits (None: none or not
    known) and ``resources`` its kernel tree's usage when last reported.
    """

    sandbox_id: str
    context_id: str
    language: str
    generation: Optional[int] = dataclasses.field(default=None, compare=False)
    memory_limit: Optional[int] = dataclasses.field(default=None, compare=False)
    pids_limit: Optional[int] = dataclasses.field(default=None, compare=False)
    resources: Optional[ContextResources] = dataclasses.field(default=None, compare=False)

    def bind(self, runner: ContextRunner, closer: ContextCloser) -> Self:
        """A copy of this handle whose run() calls ``runner(code, cwd, env, timeout)``
        and whose close() calls ``closer()``."""
        bound = dataclasses.replace(self)
        object.__setattr__(bound, "_runner", runner)
        object.__setattr__(bound, "_closer", closer)
        return bound

    @property
    def bound(self) -> bool:
        return "_runner" in self.__dict__

    async def run(self, code: str, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  timeout: Optional[float] = None, on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None, on_error: Optional[ErrorCallback] = None,
                  on_display: Optional[DisplayCallback] = None) -> InterpreterResult:
        """Execute code inside this explicit interpreter context.

        If the named context vanished, the daemon's typed SESSION_NOT_FOUND
        error surfaces unchanged so the caller can recreate the context and
        decide what code, if any, is safe to rerun. timeout is the caller wait
        budget in seconds; 0 waits unbounded.
        """
        runner: Optional[Callable[..., Awaitable[InterpreterResult]]] = self.__dict__.get("_runner")
        if runner is None:
            raise RuntimeError("this context handle is not bound to a service; "
                               "use service.connect_context(handle) first")
        callbacks = _callbacks(on_stdout, on_stderr, on_error, on_display)
        return await runner(code, cwd, env, timeout, **callbacks)

    async def close(self) -> None:
        """Delete the context on the daemon (its kernel is shut down)."""
        closer: Optional[ContextCloser] = self.__dict__.get("_closer")
        if closer is None:
            raise RuntimeError("this context handle is not bound to a service; "
                               "use service.connect_context(handle) first")
        await closer()

    def to_json(self) -> InterpreterContextJSON:
        """The handle as plain JSON data, to store and reconnect later."""
        return InterpreterContextJSON(sandbox_id=self.sandbox_id, context_id=self.context_id,
                                      language=self.language)


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
    def code_interpreter(self) -> "AsyncCodeInterpreter":
        """The earlier-style AsyncCodeInterpreter API over this service."""
        from .code_interpreter import AsyncCodeInterpreter

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
        handle = AsyncInterpreterContext(
            sandbox_id=str(obj.get("sandbox_id") or self._sandbox_id),
            context_id=str(obj["context_id"]),
            language=str(obj.get("language") or language or ""),
            generation=obj["generation"] if isinstance(obj.get("generation"), int) else None,
            memory_limit=obj["memory_limit"] if isinstance(obj.get("memory_limit"), int) else None,
            pids_limit=obj["pids_limit"] if isinstance(obj.get("pids_limit"), int) else None,
            resources=ContextResources.from_json(obj.get("resources")),
        )
        return self._bind(handle)

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
        if not _CONTEXT_ID.match(context_id):
            raise ValueError(f"invalid context id {context_id!r}: 1-64 characters of [A-Za-z0-9._-]")
        if language is not None and known is not None and language != known:
            raise ValueError(f"context {context_id!r} is a {known!r} context, not {language!r}")
        return context_id, known if known is not None else language

    # -- contexts ------------------------------------------------------------

    async def _create_context_json(self, *, language: str, context_id: Optional[str] = None,
                                   cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                                   request_timeout: Optional[float] = None,
                                   memory_limit: Optional[int] = None,
                                   pids_limit: Optional[int] = None) -> JsonObject:
        body: Dict[str, Any] = {"language": language}
        _put_limits(body, memory_limit, pids_limit)
        if context_id is not None:
            body["context_id"] = context_id
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = dict(env)
        context: JsonObject = await self._transport.request("POST", "/contexts", body=body,
                                                            timeout=request_timeout)
        return context

    async def _list_contexts_json(self, request_timeout: Optional[float] = None) -> List[JsonObject]:
        obj = await self._transport.request("GET", "/contexts", timeout=request_timeout)
        return list((obj or {}).get("contexts") or [])

    async def _delete_context_id(self, context_id: str, request_timeout: Optional[float] = None) -> None:
        await self._transport.request("DELETE", f"/contexts/{quote_segment(context_id)}",
                                      timeout=request_timeout)

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
        obj = await self._create_context_json(language=language, context_id=context_id, cwd=cwd, env=env,
                                              request_timeout=request_timeout, memory_limit=memory_limit,
                                              pids_limit=pids_limit)
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
        obj = await self._transport.request("GET", f"/contexts/{quote_segment(context_id)}")
        actual = str(obj.get("language") or "")
        if known is not None and actual and known != actual:
            raise ValueError(f"context {context_id!r} is a {actual!r} context, not {known!r}")
        return self._handle(obj, known)

    async def list_contexts(self) -> List[AsyncInterpreterContext]:
        """The contexts created by callers (default contexts are not listed)."""
        return [self._handle(obj) for obj in await self._list_contexts_json()]

    async def delete_context(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str]) -> None:
        """Delete a context and shut its kernel down.

        Unknown contexts raise SessionNotFoundError; default contexts
        ProtectedContextError.
        """
        context_id, _ = self._resolve(context, None)
        await self._delete_context_id(context_id)

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
        body: Dict[str, Any] = {"code": code}
        if context is not None:
            body["context_id"], _ = self._resolve(context, None)
        else:
            body["language"] = language
        if isolated:
            body["isolated"] = True
        if timeout is not None:
            body["timeout"] = timeout
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = dict(env)
        if strip_ansi:
            body["strip_ansi"] = True
        _put_limits(body, memory_limit, pids_limit)
        async with self._transport.stream("POST", "/run", body=body) as resp:
            return await self._read_run(resp, on_stdout, on_stderr, on_error, on_display)

    async def _read_run(self, resp: Response, on_stdout: Optional[OutputCallback],
                        on_stderr: Optional[OutputCallback], on_error: Optional[ErrorCallback],
                        on_display: Optional[DisplayCallback]) -> InterpreterResult:
        if resp.content_type != "text/event-stream":
            # A daemon (or proxy) that answered with the plain JSON result:
            # the callbacks still see the run's output, in the result's order.
            result = InterpreterResult.from_json(await resp.json())
            if result.logs.stdout:
                await _call(on_stdout, result.logs.stdout)
            if result.logs.stderr:
                await _call(on_stderr, result.logs.stderr)
            for output in result.results:
                for display in output.displays():
                    await _call(on_display, display)
            if result.error is not None:
                await _call(on_error, result.error)
            return result

        process_id: Optional[str] = None
        events = resp.iter_sse()
        try:
            async for event in events:
                name = event.event
                if name == "start":
                    process_id = (event.json() or {}).get("process_id")
                elif name == "stdout":
                    await _call(on_stdout, str((event.json() or {}).get("text", "")))
                elif name == "stderr":
                    await _call(on_stderr, str((event.json() or {}).get("text", "")))
                elif name in ("display", "display_update"):
                    if on_display is not None:
                        bundle = (event.json() or {}).get("data") or {}
                        for display in displays_of(bundle):
                            await _call(on_display, display)
                elif name == "error":
                    if on_error is not None:
                        await _call(on_error, InterpreterError.from_json(event.json() or {}))
                elif name == "result":
                    result = InterpreterResult.from_json(event.json() or {})
                    await self._drain(events)
                    return result
                # clear_output and system frames change nothing a callback sees
        finally:
            await events.aclose()
        where = f" (process {process_id}: its record keeps the result)" if process_id else ""
        exc = KernelBridgeConnectionError(f"POST /run: the event stream ended before the result{where}")
        exc.process_id = process_id  # type: ignore[attr-defined]
        raise exc

    @staticmethod
    async def _drain(events: Any) -> None:
        try:
            async with asyncio.timeout(_DRAIN_AFTER_RESULT):
                async for _ in events:
                    pass
        except (TimeoutError, KernelBridgeError):
            pass  # the connection is then closed rather than reused


def _put_limits(body: Dict[str, Any], memory_limit: Optional[int], pids_limit: Optional[int]) -> None:
    if memory_limit is not None:
        body["memory_limit"] = memory_limit
    if pids_limit is not None:
        body["pids_limit"] = pids_limit
