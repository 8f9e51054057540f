"""The async service: AsyncInterpreterService, the contexts and runs of one
daemon, or of many daemons routed by sandbox (SPEC section 12).

A run is one POST /run read as Server-Sent Events (see _endpoints), so
callbacks see stdout, stderr, displays and the error as the kernel produces
them, and the final ``result`` event gives the whole InterpreterResult. The
handles it returns are AsyncInterpreterContext (types) bound to it; every
call on a handle goes to the daemon of the handle's ``sandbox_id`` (_routing
keeps one connection pool per sandbox and places new contexts). The
blocking API (sync) is generated from this class; nothing here blocks.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _endpoints
from ._async_code_interpreter import AsyncCodeInterpreter
from ._routing import PLACEHOLDER, Router, Sandbox, Sandboxes
from ._transport import AsyncTransport
from .errors import SandboxUnavailable
from .process import AsyncProcessHandle, AsyncProcessService
from .types import (
    AsyncInterpreterContext,
    Checkpoint,
    ContextCloser,
    ContextRunner,
    DisplayCallback,
    ErrorCallback,
    InterpreterContextJSON,
    InterpreterResult,
    JsonObject,
    OutputCallback,
    RollbackPolicy,
)

__all__ = [
    "AsyncInterpreterService",
    "AsyncInterpreterContext",
    "OutputCallback",
    "ErrorCallback",
    "DisplayCallback",
    "ContextRunner",
    "ContextCloser",
    "Checkpoint",
]

ContextRef = Union[str, AsyncInterpreterContext, InterpreterContextJSON, Mapping[str, Any]]


#: How long connecting to a sandbox may take before SandboxUnavailable
#: (a run's own duration is bounded by its ``timeout``, not by this).
DEFAULT_CONNECT_TIMEOUT = 2.0


class AsyncInterpreterService:
    """Contexts and runs of kernelbridge daemons (sandboxes), asynchronously.

    ``AsyncInterpreterService(sandbox_id, transport, process)`` serves one
    daemon through a transport of the caller's (``kernelbridge.connect_async``
    builds one); ``AsyncInterpreterService(base_url=url, token=...)`` one
    daemon whose sandbox id its first answer tells. Routed by sandbox:
    ``sandboxes={"kb-0": url, ...}``, or ``base_url`` a template with
    ``{sandbox_id}`` and ``sandboxes=["kb-0", ...]``. A sandbox whose daemon
    does not accept a connection within ``connect_timeout`` seconds raises
    SandboxUnavailable; the others keep working.
    """

    def __init__(self, sandbox_id: Optional[str] = None, transport: Optional[AsyncTransport] = None,
                 process: Optional[AsyncProcessService] = None, *, base_url: Optional[str] = None,
                 sandboxes: Optional[Sandboxes] = None, token: Optional[str] = None,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        self._view = False  # a view from sandbox() closes neither the pools nor (blocking) the loop
        self._routed = sandboxes is not None
        if transport is not None:
            if sandbox_id is None or base_url is not None or sandboxes is not None:
                raise TypeError("give either (sandbox_id, transport, process) or base_url / sandboxes")
            self._router = Router.single(sandbox_id, transport, process or AsyncProcessService(transport))
        elif sandboxes is not None:
            self._router = Router.of(base_url, sandboxes, token, connect_timeout)
        elif base_url is not None:
            if PLACEHOLDER in base_url:
                raise ValueError(f"a {PLACEHOLDER} template needs sandboxes=[...], the sandbox ids")
            self._router = Router.unnamed(base_url, token, connect_timeout)
            if sandbox_id is not None:
                self._router.learn(sandbox_id)
        else:
            raise TypeError("give (sandbox_id, transport, process), base_url=... or sandboxes=...")

    def __repr__(self) -> str:
        if self._routed:
            return f"AsyncInterpreterService(sandboxes={self._router.urls()!r})"
        (only,) = self._router.urls().items()
        return f"AsyncInterpreterService(sandbox_id={only[0]!r}, url={only[1]!r})"

    def _one(self) -> Sandbox:
        """The sandbox of a single-daemon service; ValueError for a routed one."""
        if self._routed:
            raise ValueError(f"this service routes to sandboxes {', '.join(self._router.ids)}: "
                             "name one with sandbox(sandbox_id)")
        return self._router.get(self._router.ids[0])

    @property
    def sandbox_id(self) -> str:
        """The sandbox of a single-daemon service (ValueError for a routed one)."""
        sandbox_id = self._one().sandbox_id
        if not sandbox_id:
            raise RuntimeError("the sandbox id is read from the daemon's first answer: "
                               "await health() first (or use kernelbridge.connect)")
        return sandbox_id

    @property
    def sandbox_ids(self) -> List[str]:
        """The ids of the sandboxes this service routes to, in id order."""
        return [sid for sid in self._router.ids if sid] or [self.sandbox_id]

    @property
    def sandbox_urls(self) -> Dict[str, str]:
        """{sandbox id: the URL its calls go to}, in id order."""
        return {sid or self.sandbox_id: url for sid, url in self._router.urls().items()}

    @property
    def transport(self) -> AsyncTransport:
        return self._one().transport

    @property
    def processes(self) -> AsyncProcessService:
        """The process service (list of run records)."""
        return self._one().processes

    @property
    def code_interpreter(self) -> AsyncCodeInterpreter:
        """The earlier-style AsyncCodeInterpreter API over this service."""
        return AsyncCodeInterpreter(self)

    def sandbox(self, sandbox_id: str) -> "AsyncInterpreterService":
        """The single-daemon service of one sandbox, sharing this service's
        connections (its processes, default contexts, health); closing this
        service closes it too."""
        sandbox = self._router.get(sandbox_id)
        view = AsyncInterpreterService(sandbox.sandbox_id, sandbox.transport, sandbox.processes)
        view._view = True
        return view

    def set_sandbox_url(self, sandbox_id: str, url: str) -> None:
        """Route ``sandbox_id`` to ``url`` from now on (a daemon restarted
        elsewhere, or a sandbox added); handles already made follow. No I/O."""
        if not self._routed:
            raise ValueError("set_sandbox_url routes by sandbox: build the service with sandboxes=...")
        self._router.set_url(sandbox_id, url)

    def process(self, process_id: str) -> AsyncProcessHandle:
        """A handle on one run's process record: logs, wait, kill, result."""
        return self.processes.process(process_id)

    async def health(self) -> JsonObject:
        """GET /health: status, version, sandbox_id, contexts, uptime_s."""
        health: JsonObject = await self._one().transport.request("GET", "/health")
        if isinstance(health.get("sandbox_id"), str):
            self._router.learn(str(health["sandbox_id"]))
        return health

    async def aclose(self) -> None:
        """Close the connections of this service."""
        if not self._view:
            await self._router.aclose()

    async def __aenter__(self) -> "AsyncInterpreterService":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- handles -------------------------------------------------------------

    def _handle(self, obj: Mapping[str, Any], sandbox: Sandbox,
                language: Optional[str] = None) -> AsyncInterpreterContext:
        if not sandbox.sandbox_id and isinstance(obj.get("sandbox_id"), str):
            self._router.learn(str(obj["sandbox_id"]))
        return self._bind(AsyncInterpreterContext.from_json(obj, sandbox.sandbox_id, language))

    def _bind(self, handle: AsyncInterpreterContext) -> AsyncInterpreterContext:
        async def runner(code: str, cwd: Optional[str], env: Optional[Mapping[str, str]],
                         timeout: Optional[float], **callbacks: Any) -> InterpreterResult:
            return await self.run(code, context=handle, cwd=cwd, env=env, timeout=timeout, **callbacks)

        async def closer() -> None:
            await self.delete_context(handle)

        return handle.bind(runner, closer)

    def _sandbox(self, sandbox_id: Optional[str], context_id: str) -> Sandbox:
        """The sandbox a context of ``sandbox_id`` (None: not said) lives in."""
        if self._routed:
            if sandbox_id is None:
                raise ValueError(f"context {context_id!r}: say which sandbox it lives in (sandbox_id=, "
                                 f"or its handle or JSON); this service routes to {', '.join(self._router.ids)}")
            return self._router.get(sandbox_id)
        sandbox = self._router.get(self._router.ids[0])
        if sandbox_id is not None and sandbox.sandbox_id and sandbox_id != sandbox.sandbox_id:
            raise ValueError(f"context {context_id!r} belongs to sandbox {sandbox_id!r}, "
                             f"not to this service's sandbox {sandbox.sandbox_id!r}")
        return sandbox

    def _resolve(self, context: ContextRef, language: Optional[str],
                 sandbox_id: Optional[str] = None) -> Tuple[Sandbox, str, Optional[str]]:
        """(sandbox, context_id, language or None) of a handle, its JSON or a bare id
        (of ``sandbox_id``), checked against the sandboxes and ``language``."""
        owner: Optional[str]
        if isinstance(context, AsyncInterpreterContext):
            owner, context_id, known = context.sandbox_id, context.context_id, context.language
        elif isinstance(context, Mapping):
            missing = [k for k in ("sandbox_id", "context_id", "language") if not isinstance(context.get(k), str)]
            if missing:
                raise ValueError(f"context JSON lacks string field(s) {', '.join(missing)}: {dict(context)!r}")
            owner, context_id, known = context["sandbox_id"], context["context_id"], context["language"]
        elif isinstance(context, str):
            owner, context_id, known = sandbox_id, context, None
        else:
            raise TypeError(f"a context is a handle, its JSON or a context id, not {type(context).__name__}")
        if sandbox_id is not None and owner != sandbox_id:
            raise ValueError(f"context {context_id!r} belongs to sandbox {owner!r}, not to {sandbox_id!r}")
        sandbox = self._sandbox(owner, context_id)
        _endpoints.check_context_id(context_id)
        if language is not None and known is not None and language != known:
            raise ValueError(f"context {context_id!r} is a {known!r} context, not {language!r}")
        return sandbox, context_id, known if known is not None else language

    # -- contexts ------------------------------------------------------------

    async def create_context(self, *, language: str, context_id: Optional[str] = None, cwd: Optional[str] = None,
                             env: Optional[Mapping[str, str]] = None,
                             request_timeout: Optional[float] = None, memory_limit: Optional[int] = None,
                             pids_limit: Optional[int] = None,
                             sandbox_id: Optional[str] = None) -> AsyncInterpreterContext:
        """Start a new context (a fresh kernel) and return its handle once the kernel is ready.

        ``cwd`` and ``env`` apply to the kernel process; ``memory_limit``
        (bytes) and ``pids_limit`` to its process tree (None: the daemon's
        defaults). A taken
        ``context_id`` raises ContextExistsError; an unknown language
        LanguageNotSupportedError; ``request_timeout`` (seconds) bounds the
        wait for the answer (KernelBridgeTimeoutError). A routed service
        starts it on ``sandbox_id``, else on the sandbox with the fewest
        contexts (from each one's /health; those that do not answer are
        skipped, SandboxUnavailable if none does).
        """
        placed = sandbox_id is None and self._routed
        sandbox = self._router.get(await self._router.place()) if placed else self._sandbox(sandbox_id, "new")
        try:
            obj = await _endpoints.create_context(sandbox.transport, language=language, context_id=context_id,
                                                  cwd=cwd, env=env, request_timeout=request_timeout,
                                                  memory_limit=memory_limit, pids_limit=pids_limit)
        finally:
            if placed:
                self._router.placed(sandbox.sandbox_id)
        return self._handle(obj, sandbox, language)

    def connect_context(self, context: Union[str, AsyncInterpreterContext, InterpreterContextJSON], *,
                        language: Optional[str] = None, sandbox_id: Optional[str] = None) -> AsyncInterpreterContext:
        """A bound handle on an existing context, built without a round trip.

        ``context`` is a handle (maybe of another service object on the same
        sandbox), its JSON form, or a context id. A bare id takes ``language``,
        else the language in a ``default-<language>`` id, else ``"python"``.
        A handle of another sandbox, or a ``language`` that conflicts with the
        handle's, raises ValueError. A routed service needs ``sandbox_id``
        with a bare id.
        """
        sandbox, context_id, known = self._resolve(context, language, sandbox_id)
        if known is None:
            known = context_id[len("default-"):] if context_id.startswith("default-") else "python"
        owner = sandbox.sandbox_id or self.sandbox_id
        return self._bind(AsyncInterpreterContext(owner, context_id, known))

    async def get_context(self, context: Union[str, AsyncInterpreterContext, InterpreterContextJSON], *,
                          language: Optional[str] = None, sandbox_id: Optional[str] = None) -> AsyncInterpreterContext:
        """A bound handle on an existing context, checked with the daemon.

        A context that does not exist (or vanished) raises
        SessionNotFoundError; the other checks are those of connect_context,
        with the language the daemon reports.
        """
        sandbox, context_id, known = self._resolve(context, language, sandbox_id)
        obj = await _endpoints.get_context(sandbox.transport, context_id)
        actual = str(obj.get("language") or "")
        if known is not None and actual and known != actual:
            raise ValueError(f"context {context_id!r} is a {actual!r} context, not {known!r}")
        return self._handle(obj, sandbox, known)

    async def list_contexts(self) -> List[AsyncInterpreterContext]:
        """The contexts created by callers (default contexts are not listed);
        a routed service lists those of every sandbox that answers, in
        sandbox order (SandboxUnavailable only if none does)."""
        if not self._routed:
            sandbox = self._one()
            return [self._handle(obj, sandbox) for obj in await _endpoints.list_contexts(sandbox.transport)]
        sandboxes = [self._router.get(sid) for sid in self._router.ids]
        answers = await asyncio.gather(*(_endpoints.list_contexts(s.transport) for s in sandboxes),
                                       return_exceptions=True)
        handles: List[AsyncInterpreterContext] = []
        for sandbox, answer in zip(sandboxes, answers):
            if isinstance(answer, SandboxUnavailable):
                continue
            if isinstance(answer, BaseException):
                raise answer
            handles += [self._handle(obj, sandbox) for obj in answer]
        if all(isinstance(a, SandboxUnavailable) for a in answers):
            raise answers[0]
        return handles

    async def delete_context(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str], *,
                             sandbox_id: Optional[str] = None) -> None:
        """Delete a context and shut its kernel down.

        Unknown contexts raise SessionNotFoundError; default contexts
        ProtectedContextError.
        """
        sandbox, context_id, _ = self._resolve(context, None, sandbox_id)
        await _endpoints.delete_context(sandbox.transport, context_id)

    # -- runs ----------------------------------------------------------------

    async def run(self, code: str, *, language: str = "python", context: Optional[AsyncInterpreterContext] = None,
                  isolated: bool = False, timeout: Optional[float] = None, cwd: Optional[str] = None,
                  env: Optional[Mapping[str, str]] = None, on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None, on_error: Optional[ErrorCallback] = None,
                  on_display: Optional[DisplayCallback] = None, strip_ansi: bool = False,
                  memory_limit: Optional[int] = None, pids_limit: Optional[int] = None,
                  rollback: Optional[RollbackPolicy] = None) -> InterpreterResult:
        """Execute code and return the parsed interpreter result.

        Without ``context`` the code runs in the default context of
        ``language``; ``isolated=True`` runs it in a fresh kernel destroyed
        afterwards, with ``memory_limit`` and ``pids_limit`` if given.

        A rehydrated kind='code' process handle can still replay logs and
        wait/kill, but it does not reconstruct this decomposed result on
        another worker. A vanished explicit context surfaces the daemon's
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

        ``rollback="on_error"`` asks the daemon to checkpoint the context
        before the run and to put it back when the run ends in an error, a
        timeout, a limit or the kernel's death (the result's
        ``rolled_back``); ``"never"`` does not; None (the default) sends
        nothing, leaving the daemon's default. Any other value is a
        ValueError before any I/O.

        A routed service runs in the context's sandbox; default contexts are
        per sandbox (``sandbox(sandbox_id).run(...)``), and an isolated run
        goes where a new context would.
        """
        placed = context is None and isolated and self._routed
        if context is not None:
            sandbox, context_id = self._resolve(context, None)[:2]
        else:
            sandbox, context_id = self._router.get(await self._router.place()) if placed else self._one(), None
        body = _endpoints.run_body(code, language=language, context_id=context_id, isolated=isolated,
                                   timeout=timeout, cwd=cwd, env=env, strip_ansi=strip_ansi,
                                   memory_limit=memory_limit, pids_limit=pids_limit, rollback=rollback)
        try:
            return await _endpoints.run(sandbox.transport, body, on_stdout=on_stdout, on_stderr=on_stderr,
                                        on_error=on_error, on_display=on_display)
        finally:
            if placed:
                self._router.placed(sandbox.sandbox_id)

    # -- forks and checkpoints (SPEC section 13) -----------------------------

    async def fork_context(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str], count: int = 1, context_ids: Optional[Sequence[str]] = None,
                           memory_limit: Optional[int] = None, pids_limit: Optional[int] = None, *,
                           sandbox_id: Optional[str] = None,
                           request_timeout: Optional[float] = None) -> List[AsyncInterpreterContext]:
        """Fork a context: ``count`` (1..64) new contexts, each holding what
        the context's namespace held at the fork point, in the same sandbox.

        ``context_ids`` names the forks (one fork per id; ``count``, when not
        1, must then agree); without it the daemon names them ``ctx_...``.
        The forks get the parent's limits unless ``memory_limit`` (bytes) or
        ``pids_limit`` is given. The fork waits for the runs queued before it
        in the parent; the parent is not disturbed. A kernel that cannot fork
        raises UnsupportedOptionError, a taken id ContextExistsError, an
        unknown context SessionNotFoundError; bad arguments are a ValueError
        before any I/O.
        """
        sandbox, context_id, language = self._resolve(context, None, sandbox_id)
        objs = await _endpoints.fork_context(sandbox.transport, context_id,
                                             count=None if context_ids is not None and count == 1 else count,
                                             context_ids=context_ids, memory_limit=memory_limit,
                                             pids_limit=pids_limit, request_timeout=request_timeout)
        return [self._handle(obj, sandbox, language) for obj in objs]

    async def checkpoint_context(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str], *, sandbox_id: Optional[str] = None,
                                 request_timeout: Optional[float] = None) -> Checkpoint:
        """Checkpoint a context: a frozen fork of its kernel as it is now,
        restorable any number of times with restore_context. Over the
        daemon's ``--max-checkpoints`` per context: LimitExceededError."""
        sandbox, context_id, _ = self._resolve(context, None, sandbox_id)
        obj = await _endpoints.create_checkpoint(sandbox.transport, context_id, request_timeout)
        return Checkpoint.from_json(obj, sandbox.sandbox_id)

    async def list_checkpoints(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str], *, sandbox_id: Optional[str] = None) -> List[Checkpoint]:
        """The checkpoints of a context, oldest first."""
        sandbox, context_id, _ = self._resolve(context, None, sandbox_id)
        return [Checkpoint.from_json(obj, sandbox.sandbox_id)
                for obj in await _endpoints.list_checkpoints(sandbox.transport, context_id)]

    async def delete_checkpoint(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str], checkpoint: Union[Checkpoint, str], *,
                                sandbox_id: Optional[str] = None) -> None:
        """Delete a checkpoint of a context (its frozen kernel ends). One
        that is unknown, already deleted or of another context raises
        CheckpointNotFoundError."""
        sandbox, context_id, _ = self._resolve(context, None, sandbox_id)
        await _endpoints.delete_checkpoint(sandbox.transport, context_id, _checkpoint_id(checkpoint))

    async def restore_context(self, context: Union[AsyncInterpreterContext, InterpreterContextJSON, str], checkpoint: Union[Checkpoint, str], *,
                              sandbox_id: Optional[str] = None,
                              request_timeout: Optional[float] = None) -> AsyncInterpreterContext:
        """Put a context back to a checkpoint of its own: its kernel becomes
        a fork of the checkpoint (the same context id, ``generation`` + 1,
        ``restored_from`` set); the checkpoint stays restorable. A checkpoint
        that is unknown, deleted or of another context raises
        CheckpointNotFoundError."""
        sandbox, context_id, language = self._resolve(context, None, sandbox_id)
        obj = await _endpoints.restore_context(sandbox.transport, context_id, _checkpoint_id(checkpoint),
                                               request_timeout)
        return self._handle(obj, sandbox, language)


def _checkpoint_id(checkpoint: Union[Checkpoint, str]) -> str:
    if isinstance(checkpoint, Checkpoint):
        return checkpoint.checkpoint_id
    if isinstance(checkpoint, str) and checkpoint:
        return checkpoint
    raise TypeError(f"a checkpoint is a Checkpoint or its id, not {checkpoint!r}")
