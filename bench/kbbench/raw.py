"""The floor: a minimal Jupyter client on pyzmq with hand-rolled HMAC-SHA256.

It does only what any client must do for one run: sign and send an
execute_request on shell, then read shell and iopub until both the
execute_reply and the iopub `status: idle` whose parent is that request have
come. Incoming signatures are checked (as the bridge does) and JSON is parsed
only as far as needed. It also launches kernels itself (kernelspec argv plus a
connection file) so that a kernel's own start-up time can be measured.
"""

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from datetime import datetime, timezone
from typing import IO, Any

import zmq

DELIM = b"<IDS|MSG>"
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


LIVE: set["RawKernel"] = set()  # RawKernels started and not yet shut down


class KernelTimeout(RuntimeError):
    pass


def kernelspec(name: str) -> tuple[list[str], dict[str, str]]:
    """argv and env of an installed kernelspec (jupyter_client's discovery)."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(name)  # type: ignore[no-untyped-call]
    return list(spec.argv), dict(spec.env or {})


def _free_tcp_ports(n: int) -> list[int]:
    socks: list[socket.socket] = []
    ports: list[int] = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def short_ipc_dir() -> str:
    """A private dir with a short path: xeus kernels refuse ipc endpoints
    longer than 31 characters. The caller removes it."""
    import tempfile

    return tempfile.mkdtemp(prefix="kb", dir="/tmp")


def connection_info(ipc_dir: str | None, transport: str = "ipc") -> dict[str, Any]:
    info: dict[str, Any] = {
        "transport": transport,
        "signature_scheme": "hmac-sha256",
        "key": os.urandom(32).hex(),
        "kernel_name": "",
    }
    if transport == "ipc":
        assert ipc_dir is not None
        info["ip"] = os.path.join(ipc_dir, "k")
        ports = [1, 2, 3, 4, 5]
    else:
        info["ip"] = "127.0.0.1"
        ports = _free_tcp_ports(5)
    info.update(zip(PORT_NAMES, ports))
    return info


class RawClient:
    """Sockets and signing for one kernel, given its connection info."""

    def __init__(self, info: dict[str, Any], zctx: zmq.Context[zmq.Socket[bytes]] | None = None) -> None:
        self.zctx = zctx or zmq.Context.instance()
        self.mac = hmac.new(info["key"].encode(), digestmod=hashlib.sha256)
        self.session = uuid.uuid4().hex
        self.bad_signatures = 0
        self.first_reply_s: float | None = None  # set by wait_ready
        self.live_s: float | None = None

        def url(port_name: str) -> str:
            port = info[port_name]
            if info["transport"] == "ipc":
                return f"ipc://{info['ip']}-{port}"
            return f"tcp://{info['ip']}:{port}"

        self.shell = self.zctx.socket(zmq.DEALER)
        self.control = self.zctx.socket(zmq.DEALER)
        self.iopub = self.zctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.setsockopt(zmq.RCVHWM, 0)
        for sock in (self.shell, self.control, self.iopub):
            sock.setsockopt(zmq.LINGER, 0)
        self.shell.connect(url("shell_port"))
        self.control.connect(url("control_port"))
        self.iopub.connect(url("iopub_port"))
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)

    def close(self) -> None:
        for sock in (self.shell, self.control, self.iopub):
            sock.close(0)

    # ---- wire ---------------------------------------------------------------

    def send(self, sock: zmq.Socket[bytes], msg_type: str, content: dict[str, Any]) -> str:
        msg_id = uuid.uuid4().hex
        header = json.dumps(
            {
                "msg_id": msg_id,
                "session": self.session,
                "username": "bench",
                "date": datetime.now(timezone.utc).isoformat(),
                "msg_type": msg_type,
                "version": "5.3",
            }
        ).encode()
        parts = [header, b"{}", b"{}", json.dumps(content).encode()]
        h = self.mac.copy()
        for p in parts:
            h.update(p)
        sock.send_multipart([DELIM, h.hexdigest().encode(), *parts])
        return msg_id

    def recv(self, sock: zmq.Socket[bytes]) -> tuple[str, str | None, bytes] | None:
        """(msg_type, parent msg_id, header bytes, content bytes) or None if mis-signed."""
        frames = sock.recv_multipart()
        i = frames.index(DELIM)
        sig, header, parent, metadata, content = frames[i + 1 : i + 6]
        h = self.mac.copy()
        h.update(header)
        h.update(parent)
        h.update(metadata)
        h.update(content)
        if not hmac.compare_digest(h.hexdigest().encode(), sig):
            self.bad_signatures += 1
            return None
        parent_id = json.loads(parent).get("msg_id") if len(parent) > 2 else None
        return json.loads(header)["msg_type"], parent_id, content

    # ---- one run ------------------------------------------------------------

    def execute(self, code: str, timeout: float = 60.0) -> tuple[float, int, str | None]:
        """Run code; return (seconds, stream bytes, status) once reply and idle came."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        t0 = time.perf_counter()
        msg_id = self.send(self.shell, "execute_request", content)
        deadline = t0 + timeout
        replied = idle = False
        status = None
        stream_bytes = 0
        while not (replied and idle):
            left = deadline - time.perf_counter()
            if left <= 0:
                raise KernelTimeout(f"no reply/idle after {timeout} s")
            for sock, _ in self.poller.poll(int(left * 1000)):  # as pyzmq would round
                m = self.recv(sock)
                if m is None or m[1] != msg_id:
                    continue
                msg_type, _, body = m
                if sock is self.shell:
                    if msg_type == "execute_reply":
                        replied = True
                        status = json.loads(body)["status"]
                elif msg_type == "status":
                    if json.loads(body)["execution_state"] == "idle":
                        idle = True
                elif msg_type == "stream":
                    stream_bytes += len(json.loads(body)["text"])
        return time.perf_counter() - t0, stream_bytes, status

    def wait_ready(self, timeout: float = 60.0, resend: float = 0.02,
                   proc: "subprocess.Popen[bytes] | None" = None) -> int:
        """Until a kernel_info_reply on shell and any message on iopub (slow joiner).

        kernel_info_request is sent at once (ZeroMQ queues it until the kernel
        binds) and again every `resend` s while the reply came but iopub is
        still silent. Returns the number of requests sent.
        """
        t0 = time.perf_counter()
        deadline = t0 + timeout
        self.send(self.shell, "kernel_info_request", {})
        sent, last = 1, time.perf_counter()
        replied = live = False
        self.first_reply_s = self.live_s = None
        while not (replied and live):
            now = time.perf_counter()
            if now >= deadline:
                raise KernelTimeout("kernel not ready")
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"kernel exited with {proc.returncode} while starting")
            if now - last >= (resend if replied else 1.0):
                self.send(self.shell, "kernel_info_request", {})
                sent, last = sent + 1, now
            for sock, _ in self.poller.poll(int(max(1, resend * 1000 / 4))):
                m = self.recv(sock)
                if m is None:
                    continue
                if sock is self.iopub:
                    if not live:
                        self.live_s = time.perf_counter() - t0
                    live = True
                elif m[0] == "kernel_info_reply":
                    if not replied:
                        self.first_reply_s = time.perf_counter() - t0
                    replied = True
        return sent


class RawKernel:
    """A kernel this process launched itself, driven by a RawClient."""

    def __init__(self, name: str, workdir: str, transport: str = "ipc",
                 log: IO[bytes] | None = None) -> None:
        self.name = name
        self.workdir = workdir
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        self.ipc_dir = short_ipc_dir() if transport == "ipc" else None
        self.info = connection_info(self.ipc_dir, transport)
        self.connection_file = os.path.join(workdir, "kernel.json")
        fd = os.open(self.connection_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.info, f)
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: RawClient | None = None
        self.log = log
        self.startup_s: float | None = None
        self.iopub_lag_s: float | None = None
        self.kernel_info_sent = 0

    def start(self, timeout: float = 60.0) -> "RawKernel":
        """Spawn, then wait for readiness; the time of both is startup_s."""
        argv, spec_env = kernelspec(self.name)
        argv = [a.replace("{connection_file}", self.connection_file) for a in argv]
        env = dict(os.environ, **spec_env)
        t0 = time.perf_counter()
        self.client = RawClient(self.info)  # connect first, like the bridge
        LIVE.add(self)
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self.log or subprocess.DEVNULL,
            stderr=self.log or subprocess.DEVNULL,
            start_new_session=True,
        )
        self.kernel_info_sent = self.client.wait_ready(timeout, proc=self.proc)
        self.startup_s = time.perf_counter() - t0
        # how long iopub stayed silent after the first kernel_info_reply (slow joiner)
        assert self.client.live_s is not None and self.client.first_reply_s is not None
        self.iopub_lag_s = max(0.0, self.client.live_s - self.client.first_reply_s)
        return self

    def execute(self, code: str, timeout: float = 60.0) -> tuple[float, int, str | None]:
        assert self.client is not None, "start() first"
        return self.client.execute(code, timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        LIVE.discard(self)
        if self.proc is None:
            if self.client is not None:
                self.client.close()
                self.client = None
            return
        if self.proc.poll() is None and self.client is not None:
            try:
                self.client.send(self.client.control, "shutdown_request", {"restart": False})
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(5)
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.ipc_dir:
            import shutil

            shutil.rmtree(self.ipc_dir, ignore_errors=True)
            self.ipc_dir = None


def attach(connection_file: str) -> RawClient:
    """A RawClient on a kernel someone else launched (e.g. the daemon's own)."""
    with open(connection_file) as f:
        info = json.load(f)
    client = RawClient(info)
    client.wait_ready(30.0)
    return client
