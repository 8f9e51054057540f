"""The async process service: a run's record, its log frames, waiting and signals.

A run is a process on the daemon that is not tied to the HTTP connection that
started it, so a handle can be built from a bare ``process_id`` (on another
worker, after a restart of the caller) and still replay logs, wait, signal it
or fetch its result.
"""

from __future__ import annotations

import signal as _signal
from typing import Any, AsyncIterator, List, Optional, Union

from ._transport import AsyncTransport, quote_segment
from .types import InterpreterResult, LogFrame, ProcessRecord, ProcessStatus

__all__ = ["AsyncProcessService", "AsyncProcessHandle", "SignalName"]

SignalName = Union[str, int, _signal.Signals]

_LOG_PAGE = 1000


def signal_name(sig: SignalName) -> str:
    """'SIGKILL' for 'SIGKILL', 'KILL', 'kill', 9 or signal.SIGKILL."""
    if isinstance(sig, int):
        return _signal.Signals(sig).name
    text = str(sig).strip().upper()
    return text if text.startswith("SIG") else "SIG" + text


class AsyncProcessHandle:
    """A handle on one process record, built without a round trip."""

    def __init__(self, process_id: str, transport: AsyncTransport) -> None:
        if not process_id:
            raise ValueError("process_id must not be empty")
        self._process_id = process_id
        self._transport = transport
        self._path = f"/processes/{quote_segment(process_id)}"

    def __repr__(self) -> str:
        return f"AsyncProcessHandle(process_id={self.process_id!r})"

    @property
    def process_id(self) -> str:
        """The run's process id (``prc_...``)."""
        return self._process_id

    async def info(self) -> ProcessRecord:
        """The process record; PROCESS_NOT_FOUND when unknown or evicted."""
        return ProcessRecord.from_json(await self._transport.request("GET", self._path))

    async def logs(self, cursor: Optional[int] = None, follow: bool = False) -> AsyncIterator[LogFrame]:
        """The log frames from ``cursor`` (default: the first frame kept).

        Without ``follow`` it yields the frames kept now and stops; with
        ``follow`` it goes on yielding frames as the run writes them and
        stops when the run has ended.
        """
        if follow:
            query = {"cursor": cursor, "follow": True}
            async with self._transport.stream("GET", self._path + "/logs", query=query) as resp:
                async for event in resp.iter_sse():
                    if event.event == "log":
                        yield LogFrame.from_json(event.json())
                    elif event.event == "eof":
                        break
            return
        while True:
            page = await self._transport.request(
                "GET", self._path + "/logs", query={"cursor": cursor, "limit": _LOG_PAGE})
            frames = page.get("frames") or []
            for frame in frames:
                yield LogFrame.from_json(frame)
            next_cursor = page.get("next_cursor")
            if page.get("eof") or not frames or next_cursor is None or next_cursor == cursor:
                return
            cursor = int(next_cursor)

    async def wait(self, timeout: Optional[float] = None) -> ProcessStatus:
        """Wait until the run ends, or ``timeout`` seconds pass (then ``state == "running"``)."""
        query: Any = {"timeout": timeout} if timeout is not None else None
        obj = await self._transport.request("GET", self._path + "/wait", query=query)
        return ProcessStatus.from_json(self.process_id, obj or {})

    async def kill(self, signal: SignalName = "SIGKILL") -> None:
        """Signal the run: SIGINT interrupts the kernel, SIGKILL kills it (the context vanishes)."""
        await self._transport.request("POST", self._path + "/signals", body={"signal": signal_name(signal)})

    async def result(self) -> InterpreterResult:
        """The InterpreterResult of the ended run; PROCESS_RUNNING while it runs."""
        return InterpreterResult.from_json(await self._transport.request("GET", self._path + "/result"))

    async def delete(self) -> None:
        """Forget the record and its logs; PROCESS_RUNNING while it runs."""
        await self._transport.request("DELETE", self._path)


class AsyncProcessService:
    """The processes (run records) of one daemon."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    def process(self, process_id: str) -> AsyncProcessHandle:
        """A handle on ``process_id`` (no round trip)."""
        return AsyncProcessHandle(process_id, self._transport)

    async def list(self, *, state: Optional[str] = None, context_id: Optional[str] = None) -> List[ProcessRecord]:
        """The records kept, optionally only those in ``state`` or of ``context_id``."""
        obj = await self._transport.request(
            "GET", "/processes", query={"state": state, "context_id": context_id})
        return [ProcessRecord.from_json(p) for p in (obj or {}).get("processes") or []]
