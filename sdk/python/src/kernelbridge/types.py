"""The models layer of the SDK: the data of SPEC section 2 under the names of
the published interpreter API.

One InterpreterResult per run, the context handle (AsyncInterpreterContext,
serialisable, bindable to a service) and its JSON form, process records and
log frames, the callback types, and the earlier-style API's data
(ExecutionResult, OutputMessage, ...). All are frozen dataclasses built from
the daemon's JSON by ``from_json`` class methods; unknown JSON fields are
ignored so that a newer daemon does not break an older SDK. Fields the
daemon added after the published API (a context's ``generation``, limits and
``resources``, a result's ``resources`` and ``truncated``) come after the
published ones and default to None (or False), so the published
constructors and comparisons are unchanged.

This module imports nothing from the rest of the package: no HTTP, no event
loop.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json as _json
from dataclasses import dataclass, field
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Literal,
    Mapping,
    Optional,
    Self,
    TypedDict,
    Union,
)

__all__ = [
    "JsonValue",
    "JsonObject",
    "WaitReason",
    "OutputCallback",
    "ErrorCallback",
    "DisplayCallback",
    "ContextRunner",
    "ContextCloser",
    "AsyncInterpreterContext",
    "ContextResources",
    "RunResources",
    "ForkOrigin",
    "RestoreOrigin",
    "Checkpoint",
    "RollbackPolicy",
    "InterpreterContextJSON",
    "InterpreterDisplay",
    "InterpreterProcess",
    "InterpreterLogs",
    "InterpreterError",
    "InterpreterOutput",
    "InterpreterResult",
    "LogFrame",
    "ProcessRecord",
    "ProcessStatus",
    "OutputMessage",
    "ExecutionError",
    "ExecutionResult",
    "CodeInterpreterContext",
]

JsonValue = Union[None, bool, int, float, str, List[Any], Dict[str, Any]]
JsonObject = Dict[str, Any]
#: What ``run(..., rollback=...)`` accepts (SPEC section 13): ``"never"`` (the
#: daemon's default) or ``"on_error"``.
RollbackPolicy = Literal["never", "on_error"]
ROLLBACK_POLICIES = ("never", "on_error")


class WaitReason(str, enum.Enum):
    """How a run ended (the process table of SPEC section 2)."""

    EXITED = "exited"
    TIMED_OUT = "timed_out"
    SIGNALED = "signaled"
    FAILED = "failed"
    SANDBOX_STOPPED = "sandbox_stopped"
    MEMORY_LIMIT = "memory_limit"
    PIDS_LIMIT = "pids_limit"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any) -> Optional["WaitReason"]:
        """The member for a JSON value; None for null or a reason this SDK does not know."""
        if value is None:
            return None
        try:
            return cls(value)
        except ValueError:
            return None


class _InterpreterContextKeys(TypedDict):
    sandbox_id: str
    context_id: str
    language: str


# The optional key is declared by totality rather than NotRequired[...]: with
# postponed annotations, Python 3.11 cannot see NotRequired at run time and
# would list ``generation`` in __required_keys__.
class InterpreterContextJSON(_InterpreterContextKeys, total=False):
    """The serialisable form of a context handle.

    ``generation`` (in a result's ``context``) is the context's generation
    when the run ran: 1 at creation, one more each time its kernel was
    replaced (a restart, a default context started afresh). A caller that
    sees it change knows the context's variables are gone.
    """

    generation: int


@dataclass(frozen=True)
class InterpreterDisplay:
    """One rich interpreter output bundle entry: a MIME type and its data.

    Display callbacks receive one of these per entry of each display bundle,
    in the bundle's order. ``data`` is the entry as the kernel sent it when it
    is a string (base64 for images); JSON values (``application/json``) are
    passed as their JSON text.
    """

    mime: str
    data: str


@dataclass(frozen=True)
class InterpreterProcess:
    """The process record of one run: how and why it ended."""

    process_id: str
    exit_code: Optional[int]
    signal: Optional[str]
    reason: Optional[WaitReason]
    raw_reason: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "InterpreterProcess":
        return cls(
            process_id=str(obj.get("process_id") or ""),
            exit_code=_opt_int(obj.get("exit_code")),
            signal=_opt_str(obj.get("signal")),
            reason=WaitReason.parse(obj.get("reason")),
            raw_reason=_opt_str(obj.get("raw_reason")),
        )


@dataclass(frozen=True)
class RunResources:
    """What one run cost its kernel's process tree (the kernel and every
    child): wall and CPU seconds and the peak of resident memory in bytes.
    CPU and memory are None for a kernel the daemon did not start."""

    wall_time_s: float = 0.0
    cpu_time_s: Optional[float] = None
    peak_memory_bytes: Optional[int] = None

    @classmethod
    def from_json(cls, obj: Any) -> Optional["RunResources"]:
        if not isinstance(obj, dict):
            return None
        return cls(wall_time_s=float(obj.get("wall_time_s") or 0.0),
                   cpu_time_s=_opt_float(obj.get("cpu_time_s")),
                   peak_memory_bytes=_opt_int(obj.get("peak_memory_bytes")))


@dataclass(frozen=True)
class ContextResources:
    """A context's kernel tree now: resident memory in bytes, CPU seconds
    so far, and its number of processes."""

    memory_bytes: int = 0
    cpu_time_s: float = 0.0
    pids: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> Optional["ContextResources"]:
        if not isinstance(obj, dict):
            return None
        return cls(memory_bytes=_opt_int(obj.get("memory_bytes")) or 0,
                   cpu_time_s=_opt_float(obj.get("cpu_time_s")) or 0.0,
                   pids=_opt_int(obj.get("pids")) or 0)


@dataclass(frozen=True)
class InterpreterLogs:
    """The ``stream`` output of a run, concatenated in order."""

    stdout: str = ""
    stderr: str = ""

    @classmethod
    def from_json(cls, obj: Optional[Mapping[str, Any]]) -> "InterpreterLogs":
        obj = obj or {}
        return cls(stdout=str(obj.get("stdout") or ""), stderr=str(obj.get("stderr") or ""))


@dataclass(frozen=True)
class InterpreterError:
    """The error a run raised. Traceback lines are kept as the kernel sent them."""

    name: str
    value: str
    traceback: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "InterpreterError":
        tb = obj.get("traceback") or []
        return cls(
            name=str(obj.get("name") or obj.get("ename") or ""),
            value=str(obj.get("value") or obj.get("evalue") or ""),
            traceback=[str(line) for line in tb] if isinstance(tb, list) else [str(tb)],
        )


#: The MIME types of the daemon's IPython extension (docs/charts.md).
CHART_MIME = "application/vnd.kernelbridge.chart+json"
TABLE_MIME = "application/vnd.kernelbridge.table+json"


@dataclass(frozen=True)
class InterpreterOutput:
    """One ``display_data`` or ``execute_result`` of a run.

    ``data`` is the whole MIME bundle; ``text``/``html``/``png``/``svg``/``json``
    are shortcuts into it. ``is_main_result`` is true only for the
    ``execute_result``. ``metadata`` and ``display_id`` are passed on from the
    kernel (``display_id`` is None when the kernel gave none). ``chart`` and
    ``table`` are the chart a figure plots and a DataFrame's columns as
    lists, when the kernel's formatters gave them (the daemon's IPython
    extension in Python contexts; docs/charts.md), else None.
    """

    data: JsonObject
    is_main_result: bool
    text: Optional[str] = None
    html: Optional[str] = None
    png: Optional[str] = None
    svg: Optional[str] = None
    json: Optional[JsonValue] = None
    metadata: JsonObject = field(default_factory=dict)
    display_id: Optional[str] = None
    chart: Optional[JsonObject] = None
    table: Optional[JsonObject] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "InterpreterOutput":
        raw_data = obj.get("data")
        data: JsonObject = dict(raw_data) if isinstance(raw_data, dict) else {}
        meta = obj.get("metadata")

        def pick(key: str, mime: str) -> Optional[str]:
            value = obj.get(key, None)
            if value is None:
                value = data.get(mime)
            if isinstance(value, list):  # nbformat allows multi-line strings as lists
                value = "".join(str(v) for v in value)
            return None if value is None else str(value)

        json_value = obj["json"] if obj.get("json") is not None else data.get("application/json")

        def pick_object(key: str, mime: str) -> Optional[JsonObject]:
            value = obj.get(key)
            if value is None:
                value = data.get(mime)
            return dict(value) if isinstance(value, dict) else None

        return cls(
            data=data,
            is_main_result=bool(obj.get("is_main_result", False)),
            text=pick("text", "text/plain"),
            html=pick("html", "text/html"),
            png=pick("png", "image/png"),
            svg=pick("svg", "image/svg+xml"),
            json=json_value,
            metadata=dict(meta) if isinstance(meta, dict) else {},
            display_id=_opt_str(obj.get("display_id")),
            chart=pick_object("chart", CHART_MIME),
            table=pick_object("table", TABLE_MIME),
        )

    def displays(self) -> List[InterpreterDisplay]:
        """The bundle as display entries, in the bundle's order."""
        return displays_of(self.data)


@dataclass(frozen=True)
class InterpreterResult:
    """Interpreter run result.

    Beyond the four fields of the published API it carries what the daemon
    adds: the kernel's ``execution_count``, the ``context`` the run used,
    ``truncated`` when output beyond the daemon's cap was dropped, the
    run's ``resources`` (None from a daemon that does not report them), and
    ``rolled_back`` when a ``rollback="on_error"`` run failed and the
    context was put back to its state from before the run (its
    ``context["generation"]`` is then the new one).
    """

    process: InterpreterProcess
    results: List[InterpreterOutput] = field(default_factory=list)
    logs: InterpreterLogs = field(default_factory=InterpreterLogs)
    error: Optional[InterpreterError] = None
    execution_count: Optional[int] = None
    context: Optional[InterpreterContextJSON] = None
    truncated: bool = False
    resources: Optional[RunResources] = None
    rolled_back: bool = False

    @property
    def text(self) -> Optional[str]:
        """The ``text/plain`` of the main result (the value of the last expression), if any."""
        for output in self.results:
            if output.is_main_result:
                return output.text
        return None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "InterpreterResult":
        err = obj.get("error")
        ctx = obj.get("context")
        context: Optional[InterpreterContextJSON] = None
        if isinstance(ctx, dict):
            context = InterpreterContextJSON(
                sandbox_id=str(ctx.get("sandbox_id") or ""),
                context_id=str(ctx.get("context_id") or ""),
                language=str(ctx.get("language") or ""),
            )
            generation = _opt_int(ctx.get("generation"))
            if generation is not None:
                context["generation"] = generation
        return cls(
            process=InterpreterProcess.from_json(obj.get("process") or {}),
            results=[InterpreterOutput.from_json(o) for o in obj.get("results") or [] if isinstance(o, dict)],
            logs=InterpreterLogs.from_json(obj.get("logs")),
            error=InterpreterError.from_json(err) if isinstance(err, dict) else None,
            execution_count=_opt_int(obj.get("execution_count")),
            context=context,
            truncated=bool(obj.get("truncated", False)),
            resources=RunResources.from_json(obj.get("resources")),
            rolled_back=bool(obj.get("rolled_back", False)),
        )


@dataclass(frozen=True)
class LogFrame:
    """One log frame of a process: ``channel`` is stdout, stderr or system."""

    cursor: int
    channel: str
    data: str
    timestamp: Any = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "LogFrame":
        return cls(
            cursor=int(obj.get("cursor") or 0),
            channel=str(obj.get("channel") or ""),
            data=str(obj.get("data") or ""),
            timestamp=obj.get("timestamp"),
        )


@dataclass(frozen=True)
class ProcessRecord:
    """The daemon's record of one run (SPEC section 4)."""

    process_id: str
    kind: str
    state: str
    context_id: Optional[str] = None
    language: Optional[str] = None
    started_at: Any = None
    ended_at: Any = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    reason: Optional[WaitReason] = None
    raw_reason: Optional[str] = None
    resources: Optional[RunResources] = None
    rolled_back: bool = False

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ProcessRecord":
        return cls(
            process_id=str(obj.get("process_id") or ""),
            kind=str(obj.get("kind") or "code"),
            state=str(obj.get("state") or ""),
            context_id=_opt_str(obj.get("context_id")),
            language=_opt_str(obj.get("language")),
            started_at=obj.get("started_at"),
            ended_at=obj.get("ended_at"),
            exit_code=_opt_int(obj.get("exit_code")),
            signal=_opt_str(obj.get("signal")),
            reason=WaitReason.parse(obj.get("reason")),
            raw_reason=_opt_str(obj.get("raw_reason")),
            resources=RunResources.from_json(obj.get("resources")),
            rolled_back=obj.get("rolled_back") is True,
        )


@dataclass(frozen=True)
class ProcessStatus:
    """The answer of a wait: ``state`` is ``"terminal"`` once the run ended,
    ``"running"`` (with null fields) when the wait ran out first."""

    process_id: str
    state: str
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    reason: Optional[WaitReason] = None
    raw_reason: Optional[str] = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, process_id: str, obj: Mapping[str, Any]) -> "ProcessStatus":
        return cls(
            process_id=process_id,
            state=str(obj.get("state") or ""),
            exit_code=_opt_int(obj.get("exit_code")),
            signal=_opt_str(obj.get("signal")),
            reason=WaitReason.parse(obj.get("reason")),
            raw_reason=_opt_str(obj.get("raw_reason")),
        )


@dataclass(frozen=True)
class ForkOrigin:
    """Where a fork came from: the parent context and its execution count
    and generation at the fork point (a context's ``forked_from``)."""

    context_id: str
    execution_count: Optional[int] = None
    generation: Optional[int] = None

    @classmethod
    def from_json(cls, obj: Any) -> Optional["ForkOrigin"]:
        if not isinstance(obj, dict) or not isinstance(obj.get("context_id"), str):
            return None
        return cls(context_id=obj["context_id"], execution_count=_opt_int(obj.get("execution_count")),
                   generation=_opt_int(obj.get("generation")))


@dataclass(frozen=True)
class RestoreOrigin:
    """The checkpoint a context's kernel was last restored from, and that
    checkpoint's execution count (a context's ``restored_from``)."""

    checkpoint_id: str
    execution_count: Optional[int] = None

    @classmethod
    def from_json(cls, obj: Any) -> Optional["RestoreOrigin"]:
        if not isinstance(obj, dict) or not isinstance(obj.get("checkpoint_id"), str):
            return None
        return cls(checkpoint_id=obj["checkpoint_id"], execution_count=_opt_int(obj.get("execution_count")))


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint of a context: a frozen fork that runs nothing and can
    be restored any number of times (SPEC section 13).

    ``execution_count`` is the context's at the checkpoint, ``created_at``
    the daemon's timestamp as it sent it, ``memory_bytes`` what the frozen
    kernel costs (the pages it no longer shares; it changes as the context
    writes, so it is not compared). ``sandbox_id`` is the sandbox of its
    context ("" when not known).
    """

    checkpoint_id: str
    context_id: str
    execution_count: Optional[int] = None
    created_at: Any = None
    memory_bytes: Optional[int] = field(default=None, compare=False)
    sandbox_id: str = ""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], sandbox_id: str = "") -> "Checkpoint":
        return cls(
            checkpoint_id=str(obj.get("checkpoint_id") or ""),
            context_id=str(obj.get("context_id") or ""),
            execution_count=_opt_int(obj.get("execution_count")),
            created_at=obj.get("created_at"),
            memory_bytes=_opt_int(obj.get("memory_bytes")),
            sandbox_id=sandbox_id,
        )


def check_rollback(rollback: str) -> str:
    """``rollback`` if it is a policy the daemon knows; ValueError otherwise."""
    if rollback not in ROLLBACK_POLICIES:
        raise ValueError(f"rollback must be one of {', '.join(map(repr, ROLLBACK_POLICIES))}, not {rollback!r}")
    return rollback


# -- context handles -----------------------------------------------------------

OutputCallback = Callable[[str], Union[None, Awaitable[None]]]
ErrorCallback = Callable[[InterpreterError], Union[None, Awaitable[None]]]
DisplayCallback = Callable[[InterpreterDisplay], Union[None, Awaitable[None]]]
ContextRunner = Callable[[str, Optional[str], Optional[Mapping[str, str]], Optional[float]],
                         Awaitable[InterpreterResult]]
ContextCloser = Callable[[], Awaitable[None]]


def given_callbacks(on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
                    on_error: Optional[ErrorCallback],
                    on_display: Optional[DisplayCallback]) -> Dict[str, Any]:
    """The callbacks that were given, by keyword (the ``**callbacks`` passed on)."""
    given = {"on_stdout": on_stdout, "on_stderr": on_stderr, "on_error": on_error, "on_display": on_display}
    return {k: v for k, v in given.items() if v is not None}


async def call_back(callback: Optional[Callable[[Any], Any]], arg: Any) -> None:
    """Call a plain or async callback (awaiting the latter); nothing when None."""
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
    result's ``context["generation"]`` or a fresh ``get_context`` to
    know whether the kernel, and so its state, was replaced. ``memory_limit``
    (bytes) and ``pids_limit`` are the context's limits (None: none or not
    known) and ``resources`` its kernel tree's usage when last reported.
    ``forked_from`` says which context (at which execution count and
    generation) a fork was made from, ``restored_from`` which checkpoint
    the context's kernel was last restored from (None: neither, or not
    known).
    """

    sandbox_id: str
    context_id: str
    language: str
    generation: Optional[int] = dataclasses.field(default=None, compare=False)
    memory_limit: Optional[int] = dataclasses.field(default=None, compare=False)
    pids_limit: Optional[int] = dataclasses.field(default=None, compare=False)
    resources: Optional[ContextResources] = dataclasses.field(default=None, compare=False)
    forked_from: Optional[ForkOrigin] = dataclasses.field(default=None, compare=False)
    restored_from: Optional[RestoreOrigin] = dataclasses.field(default=None, compare=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], sandbox_id: str, language: Optional[str] = None) -> Self:
        """An (unbound) handle from the daemon's JSON of a context; null or
        missing optional fields become None."""
        return cls(
            sandbox_id=str(obj.get("sandbox_id") or sandbox_id),
            context_id=str(obj["context_id"]),
            language=str(obj.get("language") or language or ""),
            generation=_opt_int(obj.get("generation")),
            memory_limit=_opt_int(obj.get("memory_limit")),
            pids_limit=_opt_int(obj.get("pids_limit")),
            resources=ContextResources.from_json(obj.get("resources")),
            forked_from=ForkOrigin.from_json(obj.get("forked_from")),
            restored_from=RestoreOrigin.from_json(obj.get("restored_from")),
        )

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
                  on_display: Optional[DisplayCallback] = None,
                  rollback: Optional[RollbackPolicy] = None) -> InterpreterResult:
        """Execute code inside this explicit interpreter context.

        If the named context vanished, the daemon's typed SESSION_NOT_FOUND
        error surfaces unchanged so the caller can recreate the context and
        decide what code, if any, is safe to rerun. timeout is the caller wait
        budget in seconds; 0 waits unbounded. ``rollback="on_error"`` keeps
        the context's state from before the run if the run fails (see the
        service's run); None leaves the daemon's default.
        """
        runner: Optional[Callable[..., Awaitable[InterpreterResult]]] = self.__dict__.get("_runner")
        if runner is None:
            raise RuntimeError("this context handle is not bound to a service; "
                               "use service.connect_context(handle) first")
        callbacks = given_callbacks(on_stdout, on_stderr, on_error, on_display)
        if rollback is not None:
            callbacks["rollback"] = check_rollback(rollback)
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


# -- the earlier-style API's data ---------------------------------------------

_EARLIER_LANGUAGE = "python"


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
    language: str = _EARLIER_LANGUAGE
    active: bool = True

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "CodeInterpreterContext":
        return cls(
            id=str(obj.get("context_id") or ""),
            cwd=obj.get("cwd") if isinstance(obj.get("cwd"), str) else None,
            language=str(obj.get("language") or _EARLIER_LANGUAGE),
            active=obj.get("state") != "dead",
        )


# -- helpers ------------------------------------------------------------------


def displays_of(bundle: Mapping[str, Any]) -> List[InterpreterDisplay]:
    """One InterpreterDisplay per entry of a MIME bundle, in its order."""
    out: List[InterpreterDisplay] = []
    for mime, value in bundle.items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value) and not mime.endswith("json"):
            text = "".join(value)
        else:
            text = _json.dumps(value, ensure_ascii=False)
        out.append(InterpreterDisplay(mime=str(mime), data=text))
    return out


def _opt_int(value: Any) -> Optional[int]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _opt_float(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _opt_str(value: Any) -> Optional[str]:
    return None if value is None else str(value)
