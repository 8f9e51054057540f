"""The earlier-style code interpreter API, kept for code written against it.

``AsyncCodeInterpreter`` / ``CodeInterpreter`` run Python only. By default
code runs in the default shared context (``default-python``), which keeps
variables, imports and functions across runs; ``create_context()`` gives an
isolated one. The default context cannot be deleted and is not listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Union

from .interpreter import AsyncInterpreterContext, AsyncInterpreterService
from .sync import InterpreterContext, InterpreterService, run_with_callbacks
from .types import InterpreterContextJSON, InterpreterError, InterpreterOutput, InterpreterResult

__all__ = [
    "AsyncCodeInterpreter",
    "CodeInterpreter",
    "CodeInterpreterContext",
    "OutputMessage",
    "ExecutionError",
    "ExecutionResult",
]

_LANGUAGE = "python"


@dataclass(frozen=True)
class OutputMessage:
    """Represents stdout or stderr output from code execution."""

    output: str


@dataclass(frozen=True)
class ExecutionError:
    """Represents an error that occurred during code execution."""

    name: str
    value: str
    traceback: Optional[str] = None

    @classmethod
    def from_interpreter_error(cls, error: InterpreterError) -> "ExecutionError":
        return cls(name=error.name, value=error.value,
                   traceback="\n".join(error.traceback) if error.traceback else None)


@dataclass(frozen=True)
class ExecutionResult:
    """Result of code execution: the run's stdout, stderr and error, plus its rich outputs."""

    stdout: str = ""
    stderr: str = ""
    error: Optional[ExecutionError] = None
    results: List[InterpreterOutput] = field(default_factory=list)

    @classmethod
    def from_interpreter_result(cls, result: InterpreterResult) -> "ExecutionResult":
        return cls(
            stdout=result.logs.stdout,
            stderr=result.logs.stderr,
            error=ExecutionError.from_interpreter_error(result.error) if result.error else None,
            results=list(result.results),
        )


@dataclass(frozen=True)
class CodeInterpreterContext:
    """An interpreter context as the earlier API shows it."""

    id: str
    cwd: Optional[str] = None
    language: str = _LANGUAGE
    active: bool = True

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "CodeInterpreterContext":
        return cls(
            id=str(obj.get("context_id") or ""),
            cwd=obj.get("cwd") if isinstance(obj.get("cwd"), str) else None,
            language=str(obj.get("language") or _LANGUAGE),
            active=obj.get("state") != "dead",
        )


Handler = Callable[[Any], Union[None, Awaitable[None]]]
ContextArg = Union[CodeInterpreterContext, AsyncInterpreterContext, InterpreterContext, InterpreterContextJSON, str]


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

    def __init__(self, service: AsyncInterpreterService) -> None:
        self._service = service

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
        callbacks = _adapt(on_stdout, on_stderr, on_error)
        handle = None
        if context is not None:
            handle = self._service.connect_context(_context_id(context), language=_LANGUAGE)
        result = await self._service.run(code, language=_LANGUAGE, context=handle, timeout=timeout,
                                         env=envs, **callbacks)
        return ExecutionResult.from_interpreter_result(result)

    async def create_context(self, cwd: Optional[str] = None,
                             request_timeout: Optional[float] = None) -> CodeInterpreterContext:
        """Create a new isolated interpreter context (its own global namespace)."""
        obj = await self._service._create_context_json(language=_LANGUAGE, cwd=cwd,
                                                        request_timeout=request_timeout)
        return CodeInterpreterContext.from_json(obj)

    async def list_contexts(self, request_timeout: Optional[float] = None) -> List[CodeInterpreterContext]:
        """List all user-created Python interpreter contexts (the default context is not included)."""
        contexts = await self._service._list_contexts_json(request_timeout=request_timeout)
        return [CodeInterpreterContext.from_json(c) for c in contexts
                if str(c.get("language") or "").lower() == _LANGUAGE]

    async def delete_context(self, context: ContextArg, request_timeout: Optional[float] = None) -> None:
        """Delete an interpreter context and shut down its kernel. The default context cannot be
        deleted (ProtectedContextError)."""
        await self._service._delete_context_id(_context_id(context), request_timeout=request_timeout)


class CodeInterpreter:
    """Blocking CodeInterpreter: handles code execution within a sandbox. Currently supports only Python."""

    def __init__(self, service: InterpreterService) -> None:
        self._service = service
        self._impl = AsyncCodeInterpreter(service.impl)
        self._bridge = service.bridge

    def run_code(self, code: str, *, context: Optional[ContextArg] = None,
                 on_stdout: Optional[Handler] = None, on_stderr: Optional[Handler] = None,
                 on_error: Optional[Handler] = None, envs: Optional[Dict[str, str]] = None,
                 timeout: Optional[int] = None) -> ExecutionResult:
        """Execute Python code in the sandbox (see AsyncCodeInterpreter.run_code).

        Handlers are called in this thread as output arrives.
        """
        handlers = {name: cb for name, cb in
                    (("on_stdout", on_stdout), ("on_stderr", on_stderr), ("on_error", on_error)) if cb is not None}
        return run_with_callbacks(
            self._bridge,
            lambda relayed: self._impl.run_code(code, context=context, envs=envs, timeout=timeout, **relayed),
            handlers)

    def create_context(self, cwd: Optional[str] = None,
                       request_timeout: Optional[float] = None) -> CodeInterpreterContext:
        """Create a new isolated interpreter context (its own global namespace)."""
        return self._bridge.run(self._impl.create_context(cwd=cwd, request_timeout=request_timeout))

    def list_contexts(self, request_timeout: Optional[float] = None) -> List[CodeInterpreterContext]:
        """List all user-created Python interpreter contexts (the default context is not included)."""
        return self._bridge.run(self._impl.list_contexts(request_timeout=request_timeout))

    def delete_context(self, context: ContextArg, request_timeout: Optional[float] = None) -> None:
        """Delete an interpreter context; the default context cannot be deleted."""
        self._bridge.run(self._impl.delete_context(context, request_timeout=request_timeout))
