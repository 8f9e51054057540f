"""The earlier-style async API: AsyncCodeInterpreter (Python only).

By default code runs in the default shared context (``default-python``),
which keeps variables, imports and functions across runs;
``create_context()`` gives an isolated one. The default context cannot be
deleted and is not listed. Written on _endpoints, so it needs from its
service only the transport: it sits below AsyncInterpreterService, whose
``code_interpreter`` property builds it. The blocking CodeInterpreter is
generated from this class (sync); both are exported by code_interpreter.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Protocol, Union

from . import _endpoints
from ._transport import AsyncTransport
from .types import (
    CodeInterpreterContext,
    ExecutionError,
    ExecutionResult,
    InterpreterContextJSON,
    OutputMessage,
)

__all__ = ["AsyncCodeInterpreter", "ContextArg", "Handler"]

_LANGUAGE = "python"

Handler = Callable[[Any], Union[None, Awaitable[None]]]


class ContextHandle(Protocol):
    """Any context handle of the newer API (async or blocking)."""

    @property
    def context_id(self) -> str: ...


ContextArg = Union[CodeInterpreterContext, ContextHandle, InterpreterContextJSON, str]


class TransportOwner(Protocol):
    """What AsyncCodeInterpreter needs of its service: the daemon's transport."""

    @property
    def transport(self) -> AsyncTransport: ...


def _context_id(context: ContextArg) -> str:
    if isinstance(context, CodeInterpreterContext):
        return context.id
    if isinstance(context, str):
        return context
    if isinstance(context, Mapping):
        return str(context["context_id"])
    return str(context.context_id)


def _adapt(on_stdout: Optional[Handler], on_stderr: Optional[Handler],
           on_error: Optional[Handler]) -> Dict[str, Any]:
    """New-API callbacks that call the earlier API's handlers with its message types."""
    adapted: Dict[str, Any] = {}
    if on_stdout is not None:
        adapted["on_stdout"] = lambda text, cb=on_stdout: cb(OutputMessage(output=text))
    if on_stderr is not None:
        adapted["on_stderr"] = lambda text, cb=on_stderr: cb(OutputMessage(output=text))
    if on_error is not None:
        adapted["on_error"] = lambda err, cb=on_error: cb(ExecutionError.from_interpreter_error(err))
    return adapted


class AsyncCodeInterpreter:
    """Handles code interpretation and execution within a sandbox. Currently supports only Python."""

    def __init__(self, service: TransportOwner) -> None:
        self._transport = service.transport

    async def run_code(self, code: str, *, context: Optional[ContextArg] = None,
                       on_stdout: Optional[Handler] = None, on_stderr: Optional[Handler] = None,
                       on_error: Optional[Handler] = None, envs: Optional[Dict[str, str]] = None,
                       timeout: Optional[int] = None) -> ExecutionResult:
        """Execute Python code in the sandbox.

        By default, code runs in the default shared context which persists
        variables, imports, and functions across executions. To run in an
        isolated context, create a new context with create_context() and pass
        it as context argument. ``envs`` apply to this run only; ``timeout``
        is in seconds, 0 means no timeout. Handlers (plain or async) get
        OutputMessage / ExecutionError as output arrives.
        """
        context_id = _endpoints.check_context_id(_context_id(context)) if context is not None else None
        body = _endpoints.run_body(code, language=_LANGUAGE, context_id=context_id, timeout=timeout, env=envs)
        result = await _endpoints.run(self._transport, body, **_adapt(on_stdout, on_stderr, on_error))
        return ExecutionResult.from_interpreter_result(result)

    async def create_context(self, cwd: Optional[str] = None,
                             request_timeout: Optional[float] = None) -> CodeInterpreterContext:
        """Create a new isolated interpreter context (its own global namespace)."""
        obj = await _endpoints.create_context(self._transport, language=_LANGUAGE, cwd=cwd,
                                              request_timeout=request_timeout)
        return CodeInterpreterContext.from_json(obj)

    async def list_contexts(self, request_timeout: Optional[float] = None) -> List[CodeInterpreterContext]:
        """List all user-created Python interpreter contexts (the default context is not included)."""
        contexts = await _endpoints.list_contexts(self._transport, request_timeout=request_timeout)
        return [CodeInterpreterContext.from_json(c) for c in contexts
                if str(c.get("language") or "").lower() == _LANGUAGE]

    async def delete_context(self, context: ContextArg, request_timeout: Optional[float] = None) -> None:
        """Delete an interpreter context and shut down its kernel. The default context cannot be
        deleted (ProtectedContextError)."""
        await _endpoints.delete_context(self._transport, _context_id(context), request_timeout=request_timeout)
