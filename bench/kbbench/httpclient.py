"""HTTP/1.1 clients of the daemon and its peers: http.client kept alive (what
a Python caller would use), and a one-write socket client (a diagnostic
that separates http.client's own cost from the daemon's).

Not for: timing or checking answers (calls.py), the daemon (daemon.py).
"""

import http.client
import json
import socket
import time
from typing import Any


class Http:
    """A kept-alive http.client connection to 127.0.0.1:port."""

    # servers close idle connections: kernelbridge one that sent no request
    # head within --header-timeout (default 10 s) of its last response
    IDLE_REOPEN_S = 5

    def __init__(self, port: int, headers: dict[str, str] | None = None,
                 timeout: float = 600) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.headers = dict(headers or {})
        self.last_used = time.monotonic()

    def request(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        """One request; a body that is not bytes is sent as JSON."""
        now = time.monotonic()
        if now - self.last_used > self.IDLE_REOPEN_S:
            self.conn.close()  # reconnects on the next request
        self.last_used = now
        headers = dict(self.headers)
        payload: bytes | bytearray | None = None
        if body is not None:
            payload = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=payload, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, data

    def json(self, method: str, path: str, body: object = None,
             expect: tuple[int, ...] = (200, 201, 204)) -> Any:
        status, data = self.request(method, path, body)
        if status not in expect:
            raise RuntimeError(f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data) if data else None

    def close(self) -> None:
        self.conn.close()


class RawHttp:
    """HTTP/1.1 over a bare socket, one write per request: a diagnostic to
    separate http.client's own cost from the daemon's."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def request(self, method, path, body=b""):
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.sock.sendall(head.encode() + b"\r\n" + body)
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = None
        chunked = False
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        if chunked:
            data = b""
            while True:
                while b"\r\n" not in self.buf:
                    self._fill()
                size_line, _, self.buf = self.buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(self.buf) < size + 2:
                    self._fill()
                data += self.buf[:size]
                self.buf = self.buf[size + 2 :]
                if size == 0:
                    return status, data
        length = length or 0
        while len(self.buf) < length:
            self._fill()
        data, self.buf = self.buf[:length], self.buf[length:]
        return status, data

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def close(self):
        self.sock.close()
