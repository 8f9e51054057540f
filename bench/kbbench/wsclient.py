"""A client of a kernel websocket (`/api/kernels/{id}/channels`) of
kernelbridge or Jupyter Server, in the legacy JSON framing or the
`v1.kernel.websocket.jupyter.org` subprotocol: websocket-client with
TCP_NODELAY on its socket (checked) and UTF-8 validation of text frames
off (its pure-Python validator would otherwise dominate a legacy frame).

Not for: Jupyter Server's own lifecycle (peers.py).
"""

import json
import select
import socket
import struct
import time
import uuid

import websocket  # python3-websocket
from websocket import ABNF

V1 = "v1.kernel.websocket.jupyter.org"
CODE = "1+1"


def encode_v1(channel, header, parent, metadata, content):
    parts = [channel.encode()] + [json.dumps(x).encode() for x in (header, parent, metadata, content)]
    n = len(parts) + 1
    offsets, at = [], 8 * (n + 1)
    for part in parts:
        offsets.append(at)
        at += len(part)
    offsets.append(at)
    return struct.pack("<%dQ" % (n + 1), n, *offsets) + b"".join(parts)


def decode_v1(data):
    """(channel, msg_type, parent msg_id, content bytes) of a v1 frame; only
    the parts needed to follow a run are parsed."""
    n = struct.unpack_from("<Q", data)[0]
    off = struct.unpack_from("<%dQ" % n, data, 8)
    channel = data[off[0]:off[1]].decode()
    msg_type = json.loads(data[off[1]:off[2]])["msg_type"]
    parent = data[off[2]:off[3]]
    parent_id = json.loads(parent).get("msg_id") if len(parent) > 2 else None
    return channel, msg_type, parent_id, data[off[4]:off[5]]


class WsKernel:
    """websocket-client on /api/kernels/{id}/channels of kernelbridge or
    Jupyter Server; legacy JSON framing or (v1) the v1 subprotocol."""

    TIMEOUT_S = 60

    def __init__(self, port, kernel_id, token=None, v1=False, nodelay_server=False):

        self.v1 = v1
        self.session = uuid.uuid4().hex
        url = f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?session_id={self.session}"
        if nodelay_server:
            url += "&nodelay=1"  # kbbench/jupyter_server_launch.py
        self.ws = websocket.create_connection(
            url, timeout=120, header=[f"Authorization: token {token}"] if token else [],
            subprotocols=[V1] if v1 else None, skip_utf8_validation=True,
            sockopt=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),))
        if self.ws.getsubprotocol() != (V1 if v1 else None):
            raise RuntimeError(f"subprotocol {self.ws.getsubprotocol()!r}, wanted {V1 if v1 else None}")
        if not self.ws.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
            raise RuntimeError("TCP_NODELAY not set on the client socket")
        self.drained = 0  # messages of other runs read before an execute

    def _drain(self):
        """Read, untimed, what is waiting: iopub of other clients' runs, and
        pings (answered; recv() would wait past a ping for a data frame)."""
        while select.select([self.ws.sock], [], [], 0)[0]:
            opcode, _ = self.ws.recv_data(control_frame=True)
            self.drained += opcode in (ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY)

    def _next(self, deadline):
        """(channel, msg_type, parent msg_id, content) of the next message."""
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"websocket run: no reply and idle after {self.TIMEOUT_S} s")
        self.ws.settimeout(left)  # pings answered in recv() would keep a fixed timeout alive
        data = self.ws.recv()
        if self.v1:
            if isinstance(data, str):
                raise RuntimeError("a text frame in the v1 subprotocol")
            channel, msg_type, parent_id, content = decode_v1(data)
            return channel, msg_type, parent_id, content
        m = json.loads(data)
        return m.get("channel"), m["header"]["msg_type"], m["parent_header"].get("msg_id"), m["content"]

    def execute(self, code=CODE, expect="2"):
        self._drain()
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "username": "bench", "session": self.session,
                  "msg_type": "execute_request", "version": "5.3",
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": True}
        if self.v1:
            frame, send = encode_v1("shell", header, {}, {}, content), self.ws.send_binary
        else:
            frame = json.dumps({"header": header, "parent_header": {}, "metadata": {},
                                "content": content, "buffers": [], "channel": "shell"})
            send = self.ws.send
        t0 = time.perf_counter()
        send(frame)
        replied = idle = False
        result = status = None
        deadline = t0 + self.TIMEOUT_S
        while not (replied and idle):
            channel, msg_type, parent_id, body = self._next(deadline)
            if parent_id != msg_id:
                continue
            if msg_type == "execute_reply":
                replied = True
                status = (json.loads(body) if self.v1 else body)["status"]
            elif msg_type == "status":
                idle = (json.loads(body) if self.v1 else body)["execution_state"] == "idle"
            elif msg_type == "execute_result":
                result = (json.loads(body) if self.v1 else body)["data"]["text/plain"]
        dt = time.perf_counter() - t0
        if status != "ok" or result != expect:
            raise RuntimeError(f"websocket run: status {status}, result {result!r}")
        return dt

    def close(self):
        self.ws.close()
