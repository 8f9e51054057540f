"""How the blocking API runs the async one: a private event loop thread, and
the one base class every blocking wrapper derives from.

SyncBridge owns one event loop on one daemon thread; a blocking call hands a
coroutine to it and waits, so any number of caller threads can share one
service (their requests go out in parallel on the transport's connection
pool). ``Blocking._call`` is the only path from a blocking method to its
async twin: it unwraps blocking handles among the arguments, runs a
coroutine on the bridge (calling ``on_*`` callbacks in the caller's thread,
in event order, each before the next event is read), steps an async
iterator from a plain iterator, and wraps what comes back (async handles,
lists of them) into their blocking classes. sync.py is generated from the
async classes (tools/gen_sync.py) and holds nothing but one-statement
methods over this.

Not for: anything that knows HTTP, the daemon or a particular class.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import queue
import threading
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Coroutine,
    Dict,
    Generator,
    Generic,
    Iterator,
    Mapping,
    Optional,
    Self,
    Type,
    TypeVar,
)

__all__ = ["SyncBridge", "Blocking", "blocking_of", "run_with_callbacks"]

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B", bound="Blocking[Any]")


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

    def iterate(self, agen: AsyncIterator[T]) -> Generator[T, None, None]:
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


# The blocking class of each async class, filled by @blocking_of.
_BLOCKING_OF: Dict[type, "Type[Blocking[Any]]"] = {}


def blocking_of(async_class: type) -> Callable[[Type[B]], Type[B]]:
    """Class decorator: the decorated class is the blocking twin of ``async_class``
    (results of that class are wrapped into it)."""

    def register(blocking_class: Type[B]) -> Type[B]:
        _BLOCKING_OF[async_class] = blocking_class
        return blocking_class

    return register


def wrap(value: Any, bridge: SyncBridge) -> Any:
    """``value`` with async handles (also inside a list) replaced by their blocking twins."""
    if isinstance(value, list):
        return [wrap(item, bridge) for item in value]
    for klass in type(value).__mro__:
        blocking_class = _BLOCKING_OF.get(klass)
        if blocking_class is not None:
            return blocking_class._adopt(value, bridge)
    return value


def unwrap(value: Any) -> Any:
    """The async handle behind a blocking one; anything else unchanged."""
    return value.impl if isinstance(value, Blocking) else value


def _wrap_items(items: Generator[Any, None, None], bridge: SyncBridge) -> Iterator[Any]:
    try:
        for item in items:
            yield wrap(item, bridge)
    finally:
        items.close()  # a caller that stops early closes the async iterator now


class Blocking(Generic[A]):
    """The blocking twin of one async object: every call goes through ``_call``.

    Two blocking objects are equal when their async objects are (a blocking
    context handle also equals its async handle), and hash alike.
    """

    def __init__(self, impl: A, bridge: SyncBridge) -> None:
        self._impl = impl
        self._bridge = bridge

    @classmethod
    def _adopt(cls, impl: Any, bridge: SyncBridge) -> Self:
        """A blocking twin of ``impl`` built without the class's own constructor."""
        self = cls.__new__(cls)
        Blocking.__init__(self, impl, bridge)
        return self

    @property
    def impl(self) -> A:
        """The async object behind this one."""
        return self._impl

    @property
    def bridge(self) -> SyncBridge:
        """The event loop thread this object's calls run on."""
        return self._bridge

    def __repr__(self) -> str:
        text, name = repr(self._impl), type(self._impl).__name__
        return type(self).__name__ + text[len(name):] if text.startswith(name) else text

    def __eq__(self, other: object) -> bool:
        return bool(self._impl == unwrap(other))

    def __hash__(self) -> int:
        return hash(self._impl)

    def _wrap(self, value: Any) -> Any:
        return wrap(value, self._bridge)

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the async ``method`` and wait for it: coroutines run on the bridge
        (``on_*`` callbacks relayed to this thread), async iterators are stepped
        from a blocking one, plain methods are called here; the result is wrapped."""
        args = tuple(unwrap(a) for a in args)
        kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        if inspect.isasyncgenfunction(method):
            return _wrap_items(self._bridge.iterate(method(*args, **kwargs)), self._bridge)
        if not inspect.iscoroutinefunction(method):
            return self._wrap(method(*args, **kwargs))
        callbacks = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("on_") and kwargs[k] is not None}

        def start(relayed: Dict[str, Any]) -> Coroutine[Any, Any, Any]:
            coro: Coroutine[Any, Any, Any] = method(*args, **kwargs, **relayed)
            return coro

        return self._wrap(run_with_callbacks(self._bridge, start, callbacks))

    def _close(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``aclose`` and stop the event loop thread; idempotent. A view of
        another object (its async object's ``_view`` is true) shares that
        object's thread, and leaves it running."""
        if self._bridge.closed:
            return
        try:
            self._bridge.run(aclose())
        finally:
            if not getattr(self._impl, "_view", False):
                self._bridge.close()
