"""HTTP/1.1 transport of the SDK on asyncio streams (standard library only).

One AsyncTransport keeps a small pool of kept-alive connections to the daemon
and speaks just the HTTP it needs: JSON requests, Content-Length or chunked
responses, and Server-Sent Events read incrementally (an event line may be
megabytes long, so lines are split here rather than with StreamReader's
bounded readline). Error responses become the typed errors of errors.py.

A blocking probe on http.client (``fetch_json_sync``) serves ``connect()``,
which needs the daemon's /health before any event loop exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any, AsyncGenerator, AsyncIterator, Dict, List, Mapping, Optional, Tuple

from ._version import __version__
from .errors import (
    KernelBridgeConnectionError,
    KernelBridgeError,
    KernelBridgeTimeoutError,
    SandboxUnavailable,
    error_from_response,
)

__all__ = ["AsyncTransport", "SSEEvent", "fetch_json_sync", "quote_segment"]

_USER_AGENT = f"kernelbridge-python/{__version__}"
_MAX_HEADER_LINES = 200
_READ_CHUNK = 256 * 1024


def quote_segment(value: str) -> str:
    """One path segment, percent-encoded."""
    return urllib.parse.quote(value, safe="")


@dataclass(frozen=True)
class SSEEvent:
    """One Server-Sent Event: its ``event`` name and its ``data`` text."""

    event: str
    data: str
    id: Optional[str] = None

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


@dataclass
class _Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: str) -> _Endpoint:
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {url!r} (use http:// or https://)")
    if not parts.hostname:
        raise ValueError(f"no host in URL {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return _Endpoint(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


class _Connection:
    __slots__ = ("reader", "writer", "loop", "reused")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = loop
        self.reused = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if not self.loop.is_closed():
                self.writer.close()


class _StaleConnection(Exception):
    """A pooled connection turned out closed before any byte of the answer came."""


class Response:
    """One response whose head has been read; the body is read on demand.

    ``release()`` gives the connection back to the pool when the body was read
    to its end and the server keeps the connection, and closes it otherwise.
    """

    def __init__(self, transport: "AsyncTransport", conn: _Connection, method: str, path: str,
                 status: int, headers: Dict[str, str]) -> None:
        self._transport = transport
        self._conn: Optional[_Connection] = conn
        self.method = method
        self.path = path
        self.status = status
        self.headers = headers
        self._done = False
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("content-length")
        self._remaining: Optional[int] = int(cl) if cl is not None and not self._chunked else None
        self._keep_alive = headers.get("connection", "").lower() != "close"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._done, self._remaining = True, 0
        elif not self._chunked and self._remaining is None:
            self._keep_alive = False  # body runs to EOF
        if self._remaining == 0:
            self._done = True

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive."""
        conn = self._conn
        if conn is None or self._done:
            return
        reader = conn.reader
        try:
            if self._chunked:
                while True:
                    line = await reader.readline()
                    if not line.endswith(b"\n"):
                        raise KernelBridgeConnectionError(
                            f"{self.method} {self.path}: connection closed inside a chunked body")
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while True:  # trailers, up to the blank line
                            trailer = await reader.readline()
                            if trailer in (b"\r\n", b"\n", b""):
                                break
                        self._done = True
                        return
                    while size > 0:
                        data = await reader.read(min(size, _READ_CHUNK))
                        if not data:
                            raise KernelBridgeConnectionError(
                                f"{self.method} {self.path}: connection closed inside a chunk")
                        size -= len(data)
                        yield data
                    await reader.readexactly(2)
            elif self._remaining is not None:
                while self._remaining > 0:
                    data = await reader.read(min(self._remaining, _READ_CHUNK))
                    if not data:
                        raise KernelBridgeConnectionError(
                            f"{self.method} {self.path}: connection closed with "
                            f"{self._remaining} bytes of the body missing")
                    self._remaining -= len(data)
                    yield data
                self._done = True
            else:
                while True:
                    data = await reader.read(_READ_CHUNK)
                    if not data:
                        self._done = True
                        return
                    yield data
        except KernelBridgeError:
            raise
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            raise KernelBridgeConnectionError(f"{self.method} {self.path}: {exc!r}") from exc

    async def read(self) -> bytes:
        """The whole body."""
        parts: List[bytes] = []
        async for chunk in self.iter_chunks():
            parts.append(chunk)
        return b"".join(parts)

    async def json(self) -> Any:
        body = await self.read()
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError as exc:
            raise KernelBridgeError(
                "INVALID_RESPONSE", f"{self.method} {self.path}: the daemon's answer is not JSON: {exc}",
                self.status) from exc

    async def iter_sse(self) -> AsyncGenerator[SSEEvent, None]:
        """The body as Server-Sent Events (comments are skipped)."""
        buf = bytearray()
        scan = 0  # bytes of buf already searched for a newline
        event = ""
        data_lines: List[str] = []
        last_id: Optional[str] = None
        async for chunk in self.iter_chunks():
            buf += chunk
            pos = 0
            while True:
                nl = buf.find(b"\n", max(pos, scan))
                if nl < 0:
                    break
                raw = bytes(buf[pos:nl])
                pos = nl + 1
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                if not raw:  # a blank line ends an event
                    if data_lines:
                        yield SSEEvent(event or "message", "\n".join(data_lines), last_id)
                    event, data_lines = "", []
                    continue
                if raw.startswith(b":"):  # comment (keep-alive)
                    continue
                name, _, value = raw.decode("utf-8", "replace").partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if name == "event":
                    event = value
                elif name == "data":
                    data_lines.append(value)
                elif name == "id":
                    last_id = value
            if pos:
                del buf[:pos]
            scan = len(buf)
        if data_lines:
            yield SSEEvent(event or "message", "\n".join(data_lines), last_id)

    async def raise_for_status(self) -> None:
        if self.status < 400:
            return
        body = await self.read()
        try:
            decoded: Any = json.loads(body) if body else None
        except ValueError:
            decoded = body.decode("utf-8", "replace")
        sandbox_id = self._transport.sandbox_id
        if self.status == 503 and sandbox_id is not None and not (isinstance(decoded, dict) and "code" in decoded):
            # not the daemon's own error: a router in front of a sandbox that is not ready
            raise SandboxUnavailable(sandbox_id, self._transport.url,
                                     f"sandbox {sandbox_id!r} at {self._transport.url} is unavailable "
                                     f"(HTTP 503 from {self.method} {self.path})")
        raise error_from_response(self.status, decoded, method=self.method, path=self.path)

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep_alive:
            self._transport._give_back(conn)
        else:
            conn.close()


class AsyncTransport:
    """A pool of HTTP/1.1 connections to one daemon, used from one event loop at a time.

    ``url`` is the daemon's base URL (``http://127.0.0.1:8080``); ``token`` is
    sent as a bearer token when given. ``connect_timeout`` bounds the TCP (and
    TLS) handshake. With ``sandbox_id`` (the daemon's sandbox, when known) a
    daemon that cannot be reached raises SandboxUnavailable, a
    KernelBridgeConnectionError that names the sandbox.
    """

    def __init__(self, url: str, token: Optional[str] = None, *, connect_timeout: float = 10.0,
                 max_idle: int = 16, ssl_context: Optional[ssl.SSLContext] = None,
                 sandbox_id: Optional[str] = None) -> None:
        self.url = url
        self.token = token or None
        self.sandbox_id = sandbox_id
        self._endpoint = parse_url(url)
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._ssl: Optional[ssl.SSLContext] = None
        if self._endpoint.scheme == "https":
            self._ssl = ssl_context or ssl.create_default_context()
        self._idle: List[_Connection] = []
        self._closed = False

    # -- connections -------------------------------------------------------

    async def _connect(self) -> _Connection:
        ep = self._endpoint
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns a
        # connection made in the same loop turn as an outer request_timeout
        # runs out, and the request's cancellation is lost with it.
        bound = asyncio.timeout(self._connect_timeout)
        try:
            async with bound:
                reader, writer = await asyncio.open_connection(ep.host, ep.port, ssl=self._ssl, limit=1 << 20)
        except OSError as exc:  # TimeoutError among them; a caller's own timer comes as a cancellation
            if bound.expired():
                raise self._unreachable(f"connecting to {self.url} took over {self._connect_timeout} s") from exc
            raise self._unreachable(f"cannot connect to {self.url}: {exc}") from exc
        return _Connection(reader, writer, asyncio.get_running_loop())

    def _unreachable(self, message: str) -> KernelBridgeConnectionError:
        if self.sandbox_id is None:
            return KernelBridgeConnectionError(message)
        return SandboxUnavailable(self.sandbox_id, self.url, f"sandbox {self.sandbox_id!r} unavailable: {message}")

    def _take_idle(self) -> Optional[_Connection]:
        loop = asyncio.get_running_loop()
        while self._idle:
            conn = self._idle.pop()
            # A connection made on another (maybe closed) loop cannot be used here.
            if conn.loop is loop and not conn.writer.is_closing() and not conn.reader.at_eof():
                conn.reused = True
                return conn
            conn.close()
        return None

    def _give_back(self, conn: _Connection) -> None:
        if self._closed or len(self._idle) >= self._max_idle:
            conn.close()
        else:
            self._idle.append(conn)

    async def aclose(self) -> None:
        """Close every pooled connection; the transport can no longer be used."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests ----------------------------------------------------------

    def _target(self, path: str, query: Optional[Mapping[str, Any]]) -> str:
        target = self._endpoint.base_path + path
        if query:
            items: List[Tuple[str, str]] = []
            for key, value in query.items():
                if value is None:
                    continue
                if isinstance(value, bool):
                    value = "true" if value else "false"
                items.append((key, str(value)))
            if items:
                target += "?" + urllib.parse.urlencode(items)
        return target

    def _head(self, method: str, target: str, body: Optional[bytes],
              headers: Optional[Mapping[str, str]]) -> bytes:
        lines = [
            f"{method} {target} HTTP/1.1",
            f"Host: {self._endpoint.host_header}",
            f"User-Agent: {_USER_AGENT}",
            "Accept: application/json",
        ]
        if self.token:
            lines.append(f"Authorization: Bearer {self.token}")
        if body is not None:
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(body)}")
        elif method in ("POST", "PUT", "PATCH"):
            lines.append("Content-Length: 0")
        for key, value in (headers or {}).items():
            if key.lower() == "accept":
                lines[3] = f"Accept: {value}"
            else:
                lines.append(f"{key}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _exchange(self, conn: _Connection, method: str, path: str, head: bytes,
                        body: Optional[bytes]) -> Response:
        got_any = False
        try:
            conn.writer.write(head + body if body else head)
            await conn.writer.drain()
            while True:
                line = await conn.reader.readline()
                if not line:
                    raise asyncio.IncompleteReadError(b"", None)
                got_any = True
                parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
                if len(parts) < 2 or not parts[0].startswith("HTTP/"):
                    raise KernelBridgeConnectionError(
                        f"{method} {path}: not an HTTP response: {line[:80]!r}")
                status = int(parts[1])
                headers: Dict[str, str] = {}
                for _ in range(_MAX_HEADER_LINES):
                    hline = await conn.reader.readline()
                    if hline in (b"\r\n", b"\n"):
                        break
                    if not hline:
                        raise asyncio.IncompleteReadError(b"", None)
                    key, _, value = hline.decode("latin-1").partition(":")
                    key = key.strip().lower()
                    value = value.strip()
                    headers[key] = f"{headers[key]}, {value}" if key in headers else value
                else:
                    raise KernelBridgeConnectionError(f"{method} {path}: too many response headers")
                if 100 <= status < 200 and status != 101:
                    continue  # interim answer (100 Continue): the real one follows
                return Response(self, conn, method, path, status, headers)
        except KernelBridgeError:
            conn.close()
            raise
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            conn.close()
            if conn.reused and not got_any:
                raise _StaleConnection() from exc
            raise KernelBridgeConnectionError(
                f"{method} {path}: connection to {self.url} lost: {exc!r}") from exc
        except BaseException:
            conn.close()
            raise

    async def open(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                   body: Any = None, headers: Optional[Mapping[str, str]] = None,
                   content: Optional[bytes] = None) -> Response:
        """Send one request and read the head of its answer; the caller must ``release()`` it.

        ``body`` is sent as JSON; ``content`` (bytes sent as they are, with a
        JSON content type) replaces it when given.
        """
        if self._closed:
            raise KernelBridgeConnectionError("the client is closed")
        if content is not None:
            data: Optional[bytes] = content
        else:
            data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        target = self._target(path, query)
        head = self._head(method, target, data, headers)
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, method, path, head, data)
            except _StaleConnection:
                pass  # the server had closed the idle connection; nothing was processed
        conn = await self._connect()
        try:
            return await self._exchange(conn, method, path, head, data)
        except _StaleConnection as exc:  # pragma: no cover - a fresh connection is never reused
            raise KernelBridgeConnectionError(f"{method} {path}: connection lost") from exc

    async def request(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                      body: Any = None, timeout: Optional[float] = None,
                      content: Optional[bytes] = None) -> Any:
        """One JSON request; returns the decoded answer (None for an empty body).

        Raises the typed error of a non-2xx answer, KernelBridgeConnectionError
        when the daemon cannot be reached, KernelBridgeTimeoutError when
        ``timeout`` seconds pass first.
        """

        async def go() -> Any:
            resp = await self.open(method, path, query=query, body=body, content=content)
            try:
                await resp.raise_for_status()
                return await resp.json()
            finally:
                resp.release()

        if timeout is None or timeout <= 0:
            return await go()
        try:
            async with asyncio.timeout(timeout):
                return await go()
        except TimeoutError as exc:
            if isinstance(exc, KernelBridgeError):
                raise
            raise KernelBridgeTimeoutError(
                f"{method} {path}: no answer within request_timeout={timeout} s") from exc

    @contextlib.asynccontextmanager
    async def stream(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                     body: Any = None) -> AsyncIterator[Response]:
        """Open a request whose answer is read incrementally (SSE); errors are raised typed."""
        resp = await self.open(method, path, query=query, body=body,
                               headers={"Accept": "text/event-stream"})
        try:
            await resp.raise_for_status()
            yield resp
        finally:
            resp.release()


def fetch_json_sync(url: str, path: str, token: Optional[str] = None, timeout: float = 10.0) -> Any:
    """One blocking GET on http.client, for use before any event loop exists."""
    ep = parse_url(url)
    conn: http.client.HTTPConnection
    if ep.scheme == "https":
        conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)
    headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        try:
            conn.request("GET", ep.base_path + path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        except TimeoutError as exc:
            raise KernelBridgeTimeoutError(f"GET {path}: no answer from {url} within {timeout} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise KernelBridgeConnectionError(f"cannot reach {url}: {exc}") from exc
    finally:
        conn.close()
    try:
        decoded: Any = json.loads(body) if body else None
    except ValueError:
        decoded = body.decode("utf-8", "replace")
    if resp.status >= 400:
        raise error_from_response(resp.status, decoded, method="GET", path=path)
    return decoded
