"""Small helpers shared by the SDK tests (no daemon logic here)."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
import zlib
from typing import Any, Awaitable, Callable, List, Optional, TypeVar

import kernelbridge

T = TypeVar("T")


def arun(daemon: Any, body: Callable[[kernelbridge.AsyncInterpreterService], Awaitable[T]],
         token: Optional[str] = "<daemon>") -> T:
    """Run ``body(service)`` with a fresh async service on a fresh event loop."""

    async def main() -> T:
        service = await kernelbridge.connect_async(daemon.url, daemon.token if token == "<daemon>" else token)
        try:
            return await body(service)
        finally:
            await service.aclose()

    return asyncio.run(main())


def tiny_png() -> bytes:
    """A valid 1x1 PNG, built here."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


RICH_CODE = """
import base64
from IPython.display import display, HTML, SVG, JSON, Image
display(HTML('<b>bold</b>'))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>'))
display(JSON({'a': 1, 'b': [1, 2]}))
display(Image(data=base64.b64decode('%s'), format='png'))
6 * 7
""" % base64.b64encode(tiny_png()).decode()


def merge_kinds(events: List[Any]) -> List[str]:
    """The kinds of (kind, payload) events, consecutive repeats folded into one."""
    kinds: List[str] = []
    for kind, _ in events:
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
    return kinds


async def running_process_async(service: kernelbridge.AsyncInterpreterService, context_id: str,
                                timeout: float = 30.0) -> kernelbridge.AsyncProcessHandle:
    """The handle of the run now going on in ``context_id`` (polled from the daemon's list)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = await service.processes.list(state="running", context_id=context_id)
        if running:
            return service.process(running[0].process_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no running process on {context_id} within {timeout} s")


def running_process(service: kernelbridge.InterpreterService, context_id: str,
                    timeout: float = 30.0) -> kernelbridge.ProcessHandle:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = service.processes.list(state="running", context_id=context_id)
        if running:
            return service.process(running[0].process_id)
        time.sleep(0.05)
    raise AssertionError(f"no running process on {context_id} within {timeout} s")
