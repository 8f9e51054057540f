"""The blocking API: the async implementation run on a private event loop thread.

SyncBridge owns one event loop on one daemon thread; every blocking call
hands a coroutine to it and waits, so any number of caller threads can share
one InterpreterService (their requests go out in parallel on the
transport's connection pool). Run callbacks are called in the caller's own
thread, in event order, each before the next event is read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import queue
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Callable,
    Coroutine,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    TypeVar,
    Union,
)

from .interpreter import (
    AsyncInterpreterContext,
    AsyncInterpreterService,
    DisplayCallback,
    ErrorCallback,
    OutputCallback,
    _callbacks,
)
from .process import AsyncProcessHandle, AsyncProcessService, SignalName
from .types import (
    ContextResources,
    InterpreterContextJSON,
    InterpreterResult,
    JsonObject,
    LogFrame,
    ProcessRecord,
    ProcessStatus,
)

if TYPE_CHECKING:
    from .code_interpreter import CodeInterpreter

__all__ = [
    "SyncBridge",
    "InterpreterService",
    "InterpreterContext",
    "SyncInterpreterService",
    "SyncInterpreterContext",
    "ProcessService",
    "ProcessHandle",
]

T = TypeVar("T")


class SyncBridge:
    """Runs coroutines on a private event loop thread for blocking callers."""

    def __init__(self, name: str = "kernelbridge-loop") -> None:
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Start ``coro`` on the loop; returns a future for its outcome."""
        if self._closed:
            coro.close()
            raise RuntimeError("the client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking kernelbridge call was made on the client's own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its outcome (exceptions are re-raised here)."""
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in the caller: stop the request too
            raise

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """A blocking iterator over an async iterator, stepped on the loop."""
        try:
            while True:
                try:
                    item: T = self.run(_await(agen.__anext__()))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and not self._closed:
                self.run(aclose())

    def close(self) -> None:
        """Stop the loop and its thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()


def run_with_callbacks(bridge: SyncBridge, start: Callable[[Dict[str, Any]], Coroutine[Any, Any, T]],
                       callbacks: Mapping[str, Any]) -> T:
    """Run ``start(relayed_callbacks)`` on the bridge and call ``callbacks`` in
    this thread as the run's events arrive, each before the next event is read.

    An exception raised by a callback ends the run call with that exception.
    """
    if not callbacks:
        return bridge.run(start({}))
    inbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
    loop = bridge.loop

    def relay(callback: Callable[[Any], Any]) -> Callable[[Any], Any]:
        async def relayed(arg: Any) -> None:
            done: asyncio.Future[None] = loop.create_future()
            inbox.put((callback, arg, done))
            await done

        return relayed

    future = bridge.submit(start({name: relay(cb) for name, cb in callbacks.items()}))
    future.add_done_callback(lambda _: inbox.put(None))
    try:
        while True:
            item = inbox.get()
            if item is None:
                return future.result()
            callback, arg, done = item
            try:
                outcome = callback(arg)
                if inspect.isawaitable(outcome):
                    bridge.run(_await(outcome))
            except Exception as exc:  # hand it to the run, which ends with it
                loop.call_soon_threadsafe(_settle, done, exc)
            else:
                loop.call_soon_threadsafe(_settle, done, None)
    except BaseException:
        future.cancel()
        raise


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _settle(done: "asyncio.Future[None]", exc: Optional[BaseException]) -> None:
    if done.done():
        return
    if exc is None:
        done.set_result(None)
    else:
        done.set_exception(exc)


class ProcessHandle:
    """A blocking handle on one process record: logs, wait, kill, result."""

    def __init__(self, impl: AsyncProcessHandle, bridge: SyncBridge) -> None:
        self._impl = impl
        self._bridge = bridge

    def __repr__(self) -> str:
        return f"ProcessHandle(process_id={self.process_id!r})"

    @property
    def process_id(self) -> str:
        return self._impl.process_id

    def info(self) -> ProcessRecord:
        """The process record; ProcessNotFoundError when unknown or evicted."""
        return self._bridge.run(self._impl.info())

    def logs(self, cursor: Optional[int] = None, follow: bool = False) -> Iterator[LogFrame]:
        """The log frames from ``cursor``; with ``follow``, until the run ends."""
        return self._bridge.iterate(self._impl.logs(cursor=cursor, follow=follow))

    def wait(self, timeout: Optional[float] = None) -> ProcessStatus:
        """Wait until the run ends, or ``timeout`` seconds pass (then ``state == "running"``)."""
        return self._bridge.run(self._impl.wait(timeout))

    def kill(self, signal: SignalName = "SIGKILL") -> None:
        """Signal the run (SIGINT, SIGTERM or SIGKILL)."""
        self._bridge.run(self._impl.kill(signal))

    def result(self) -> InterpreterResult:
        """The InterpreterResult of the ended run; ProcessRunningError while it runs."""
        return self._bridge.run(self._impl.result())

    def delete(self) -> None:
        """Forget the record and its logs; ProcessRunningError while it runs."""
        self._bridge.run(self._impl.delete())


class ProcessService:
    """The processes (run records) of one daemon, blocking."""

    def __init__(self, impl: AsyncProcessService, bridge: SyncBridge) -> None:
        self._impl = impl
        self._bridge = bridge

    def process(self, process_id: str) -> ProcessHandle:
        return ProcessHandle(self._impl.process(process_id), self._bridge)

    def list(self, *, state: Optional[str] = None, context_id: Optional[str] = None) -> List[ProcessRecord]:
        return self._bridge.run(self._impl.list(state=state, context_id=context_id))


class InterpreterContext:
    """Serializable interpreter context handle (blocking)."""

    def __init__(self, impl: AsyncInterpreterContext, bridge: SyncBridge) -> None:
        self._impl = impl
        self._bridge = bridge

    def __repr__(self) -> str:
        return (f"InterpreterContext(sandbox_id={self.sandbox_id!r}, context_id={self.context_id!r}, "
                f"language={self.language!r})")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InterpreterContext):
            return self._impl == other._impl
        if isinstance(other, AsyncInterpreterContext):
            return self._impl == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._impl)

    @property
    def sandbox_id(self) -> str:
        return self._impl.sandbox_id

    @property
    def context_id(self) -> str:
        return self._impl.context_id

    @property
    def language(self) -> str:
        return self._impl.language

    @property
    def generation(self) -> Optional[int]:
        """The context's generation as the daemon last reported it (see
        AsyncInterpreterContext)."""
        return self._impl.generation

    @property
    def memory_limit(self) -> Optional[int]:
        return self._impl.memory_limit

    @property
    def pids_limit(self) -> Optional[int]:
        return self._impl.pids_limit

    @property
    def resources(self) -> Optional[ContextResources]:
        """The kernel tree's usage when the daemon last reported it."""
        return self._impl.resources

    @property
    def impl(self) -> AsyncInterpreterContext:
        """The async handle behind this one."""
        return self._impl

    def to_json(self) -> InterpreterContextJSON:
        """The handle as plain JSON data, to store and reconnect later."""
        return self._impl.to_json()

    def run(self, code: str, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            timeout: Optional[float] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, on_error: Optional[ErrorCallback] = None,
            on_display: Optional[DisplayCallback] = None) -> InterpreterResult:
        """Execute code inside this explicit interpreter context.

        If the named context vanished, the daemon's typed SESSION_NOT_FOUND
        error surfaces unchanged so the caller can recreate the context and
        decide what code, if any, is safe to rerun. timeout is the caller wait
        budget in seconds; 0 waits unbounded. Callbacks run in this thread.
        """
        callbacks = _callbacks(on_stdout, on_stderr, on_error, on_display)
        return run_with_callbacks(
            self._bridge,
            lambda relayed: self._impl.run(code, cwd=cwd, env=env, timeout=timeout, **relayed),
            callbacks)

    def close(self) -> None:
        """Delete the context on the daemon (its kernel is shut down)."""
        self._bridge.run(self._impl.close())


SyncContextRef = Union[str, InterpreterContext, AsyncInterpreterContext, InterpreterContextJSON]


def _unwrap(context: Any) -> Any:
    return context.impl if isinstance(context, InterpreterContext) else context


class InterpreterService:
    """Synchronous InterpreterService.

    Safe to share between threads. ``close()`` (or a ``with`` block) closes
    its connections and stops its event loop thread.
    """

    def __init__(self, impl: AsyncInterpreterService, bridge: SyncBridge) -> None:
        self._impl = impl
        self._bridge = bridge
        self._processes = ProcessService(impl.processes, bridge)

    def __repr__(self) -> str:
        return f"InterpreterService(sandbox_id={self.sandbox_id!r}, url={self._impl.transport.url!r})"

    @property
    def sandbox_id(self) -> str:
        return self._impl.sandbox_id

    @property
    def impl(self) -> AsyncInterpreterService:
        return self._impl

    @property
    def bridge(self) -> SyncBridge:
        return self._bridge

    @property
    def processes(self) -> ProcessService:
        """The process service (list of run records)."""
        return self._processes

    @property
    def code_interpreter(self) -> "CodeInterpreter":
        """The earlier-style CodeInterpreter API over this service."""
        from .code_interpreter import CodeInterpreter

        return CodeInterpreter(self)

    def process(self, process_id: str) -> ProcessHandle:
        """A handle on one run's process record: logs, wait, kill, result."""
        return self._processes.process(process_id)

    def health(self) -> JsonObject:
        """GET /health: status, version, sandbox_id, contexts, uptime_s."""
        return self._bridge.run(self._impl.health())

    def close(self) -> None:
        """Close the connections and stop the event loop thread. Idempotent."""
        if self._bridge.closed:
            return
        try:
            self._bridge.run(self._impl.aclose())
        finally:
            self._bridge.close()

    def __enter__(self) -> "InterpreterService":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _wrap(self, impl: AsyncInterpreterContext) -> InterpreterContext:
        return InterpreterContext(impl, self._bridge)

    def create_context(self, *, language: str, context_id: Optional[str] = None, cwd: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None, request_timeout: Optional[float] = None,
                       memory_limit: Optional[int] = None, pids_limit: Optional[int] = None) -> InterpreterContext:
        """Start a new context (a fresh kernel) and return its handle once the kernel is ready."""
        return self._wrap(self._bridge.run(self._impl.create_context(
            language=language, context_id=context_id, cwd=cwd, env=env, request_timeout=request_timeout,
            memory_limit=memory_limit, pids_limit=pids_limit)))

    def connect_context(self, context: Union[str, InterpreterContext, InterpreterContextJSON], *,
                        language: Optional[str] = None) -> InterpreterContext:
        """A handle on an existing context, built without a round trip (see the async API)."""
        return self._wrap(self._impl.connect_context(_unwrap(context), language=language))

    def get_context(self, context: Union[str, InterpreterContext, InterpreterContextJSON], *,
                    language: Optional[str] = None) -> InterpreterContext:
        """A handle on an existing context, checked with the daemon (SessionNotFoundError if missing)."""
        return self._wrap(self._bridge.run(self._impl.get_context(_unwrap(context), language=language)))

    def list_contexts(self) -> List[InterpreterContext]:
        """The contexts created by callers (default contexts are not listed)."""
        return [self._wrap(c) for c in self._bridge.run(self._impl.list_contexts())]

    def delete_context(self, context: Union[InterpreterContext, InterpreterContextJSON, str]) -> None:
        """Delete a context and shut its kernel down."""
        self._bridge.run(self._impl.delete_context(_unwrap(context)))

    def run(self, code: str, *, language: str = "python", context: Optional[InterpreterContext] = None,
            isolated: bool = False, timeout: Optional[float] = None, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, on_error: Optional[ErrorCallback] = None,
            on_display: Optional[DisplayCallback] = None, strip_ansi: bool = False,
            memory_limit: Optional[int] = None, pids_limit: Optional[int] = None) -> InterpreterResult:
        """Execute code and return the parsed interpreter result.

        Same semantics as AsyncInterpreterService.run; callbacks are called in
        this thread, in event order.
        """
        callbacks = _callbacks(on_stdout, on_stderr, on_error, on_display)
        ctx = _unwrap(context)
        return run_with_callbacks(
            self._bridge,
            lambda relayed: self._impl.run(code, language=language, context=ctx, isolated=isolated,
                                           timeout=timeout, cwd=cwd, env=env, strip_ansi=strip_ansi,
                                           memory_limit=memory_limit, pids_limit=pids_limit,
                                           **relayed),
            callbacks)


SyncInterpreterService = InterpreterService
SyncInterpreterContext = InterpreterContext
