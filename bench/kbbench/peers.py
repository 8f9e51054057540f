"""The processes measured (kernelbridge daemon, Jupyter Server) and their clients.

Every process started here is registered in `STARTED` and stopped by
`stop_all()` (SIGTERM, then SIGKILL of its process group after a bound).
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

STARTED: list["subprocess.Popen[bytes]"] = []  # every Popen this module started
LIVE_JC: set["JupyterClientKernel"] = set()  # JupyterClientKernels not yet shut down


def _spawn(argv: list[str], **kw: Any) -> "subprocess.Popen[bytes]":
    proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
    STARTED.append(proc)
    return proc


def stop(proc: "subprocess.Popen[bytes]", timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    if proc in STARTED:
        STARTED.remove(proc)


def stop_all() -> None:
    from . import raw

    for k in list(raw.LIVE):
        k.shutdown(timeout=2.0)
    for k in list(LIVE_JC):
        k.shutdown(now=True)
    for proc in list(STARTED):
        stop(proc)


def pid_gone(pid: int, timeout: float = 15.0) -> bool:
    """Wait until /proc/<pid> is gone (exited and reaped); True if it went."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    time.sleep(0.01)
                    continue
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, Threads from /proc/<pid>/status (KiB / count)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(val.split()[0])
    return out


def reset_peak_rss(pid):
    """Reset VmHWM to the current RSS (Linux: `5` to /proc/PID/clear_refs); returns VmRSS."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # not permitted: VmHWM then counts from the daemon's start
    return proc_status(pid)["VmRSS"]


def smaps_rollup(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def rss_by_mapping(pid, top=8):
    """Resident KiB per mapped file (or [heap], [anon], [stack]) from smaps."""
    totals = {}
    name = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                fields = line.split()
                name = fields[5] if len(fields) > 5 else "[anon]"
                name = os.path.basename(name) if name.startswith("/") else name
            elif first == "Rss:":
                totals[name] = totals.get(name, 0) + int(line.split()[1])
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads, the exited ones
    too (utime + stime of /proc/<pid>/stat; clock ticks, so 10 ms steps)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def schedstat(pid: int) -> dict[str, Any]:
    """CPU time (ns) and run slices of the live threads of a process, by thread
    name, and the ids of those threads (`tids`)."""
    cpu = slices = 0
    threads: dict[str, int] = {}
    tids: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, _, n = (int(x) for x in f.read().split())
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu += run_ns
        slices += n
        tids.append(int(tid))
        name = "engine+main" if name == "kernelbridge" else name
        threads[name] = threads.get(name, 0) + run_ns
    return {"cpu_ns": cpu, "slices": slices, "threads": threads, "tids": sorted(tids)}


def request_log_times(text):
    """Seconds per request from the daemon's request log, by 'METHOD /path'."""
    out = {"POST /run": [], "GET /health": []}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1].endswith("ms"):
            key = f"{parts[1]} {parts[2]}"
            if key in out:
                try:
                    out[key].append(float(parts[-1][:-2]) / 1e3)
                except ValueError:
                    pass
    return out


def listening_ports(pid):
    """TCP ports a process listens on (from /proc/net/tcp and its fds)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        ports.append(int(fields[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return ports


# ---- HTTP ---------------------------------------------------------------------


class Http:
    """A kept-alive http.client connection to 127.0.0.1:port."""

    IDLE_REOPEN_S = 30  # servers close idle connections (kernelbridge: 60 s)

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


# ---- kernelbridge daemon ------------------------------------------------------


def pids_naming(prefix: str) -> list[int]:
    """Pids of the processes (not this one) whose command line has an
    argument starting with prefix (a file under a dir of ours)."""
    pre = prefix.encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(pre) for a in argv):
            pids.append(int(entry))
    return pids


class Daemon:
    """`kernelbridge serve` on 127.0.0.1:<ephemeral> with a private state dir."""

    def __init__(self, binary: str, workdir: str, extra_args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        self.state_dir = os.path.join(workdir, "state")
        port_file = os.path.join(workdir, "port")
        self.log_path = os.path.join(workdir, "daemon.log")
        self.log = open(self.log_path, "wb")
        argv = [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", port_file,
                "--state-dir", self.state_dir, *extra_args]
        self.proc = _spawn(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        self.pid = self.proc.pid
        deadline = time.perf_counter() + 20
        port: int | None = None
        while port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.tail()}")
            if time.perf_counter() > deadline:
                raise RuntimeError("daemon did not write its port file")
            try:
                with open(port_file) as f:
                    port = int(f.read().strip())
            except (FileNotFoundError, ValueError):
                time.sleep(0.01)
        self.port = port
        self.http = Http(self.port)

    def tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def pool(self) -> dict[str, Any]:
        return self.http.json("GET", "/health").get("pool") or {}

    def wait_pool_settled(self, timeout: float = 60.0) -> dict[str, Any]:
        """Until no pooled kernel is starting and every entry has its target ready."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            pool = self.pool()
            if all(e.get("starting", 0) == 0 and e.get("ready", 0) >= e.get("target", 0)
                   for e in pool.values()):
                return pool
            time.sleep(0.05)
        raise RuntimeError(f"pool not settled after {timeout} s: {self.pool()}")

    def create_context(self, http: Http | None = None,
                       **body: Any) -> tuple[dict[str, Any], str | None, float]:
        """POST /contexts; returns (context JSON, its connection file path, seconds)."""
        http = http or self.http
        if "kernel_name" not in body:
            body.setdefault("language", "python")
        t0 = time.perf_counter()
        ctx = http.json("POST", "/contexts", body, expect=(201,))
        dt = time.perf_counter() - t0
        return ctx, self.connection_file_of(ctx.get("pid")), dt

    def connection_file_of(self, pid: int | None) -> str | None:
        """The connection file a kernel was started with (from its command line)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0") if a]
        except (OSError, TypeError):
            return None
        for a in argv:
            if a.startswith(self.state_dir) and a.endswith(".json"):
                return a
        return None

    def delete_context(self, ctx: dict[str, Any], http: Http | None = None,
                       wait: bool = True) -> None:
        (http or self.http).json("DELETE", f"/contexts/{ctx['context_id']}", expect=(204,))
        if wait and ctx.get("pid"):
            pid_gone(ctx["pid"])

    def status(self) -> dict[str, int]:
        return proc_status(self.pid)

    def stop(self) -> None:
        self.http.close()
        stop(self.proc)
        self.log.close()

    def processes_left(self) -> list[int]:
        """Pids of the processes whose command line names a file in this daemon's
        state dir: its kernels (each in a session of its own, so not reached by
        a signal to the daemon's process group)."""
        return pids_naming(self.state_dir + "/")

    def kill_processes_left(self) -> list[int]:
        """SIGKILL the process group of every process left (processes_left) and
        wait until each is gone; returns their pids."""
        left = self.processes_left()
        for pid in left:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for pid in left:
            pid_gone(pid, 10.0)
        return left


# ---- Jupyter Server -----------------------------------------------------------


class JupyterServer:
    """`jupyter server` on 127.0.0.1:<ephemeral>, token auth, private dirs."""

    def __init__(self, workdir):
        self.workdir = workdir
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        self.token = uuid.uuid4().hex
        env = dict(os.environ)
        for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTER_DATA_DIR", "data")):
            env[var] = os.path.join(workdir, sub)
            os.makedirs(env[var], mode=0o700, exist_ok=True)
        root = os.path.join(workdir, "root")
        os.makedirs(root, mode=0o700, exist_ok=True)
        self.log_path = os.path.join(workdir, "server.log")
        self.log = open(self.log_path, "wb")
        launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jupyter_server_launch.py")
        argv = [sys.executable, launcher, "--ServerApp.ip=127.0.0.1",
                "--ServerApp.port=0", "--ServerApp.port_retries=0", "--ServerApp.allow_root=True",
                f"--ServerApp.token={self.token}", "--ServerApp.open_browser=False",
                f"--ServerApp.root_dir={root}", "--ServerApp.log_level=WARN"]
        self.proc = _spawn(argv, stdout=self.log, stderr=self.log, env=env)
        deadline = time.perf_counter() + 60
        self.port = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {self.tail()}")
            if time.perf_counter() > deadline:
                raise RuntimeError("jupyter server did not listen")
            ports = listening_ports(self.proc.pid)
            if ports:
                self.port = ports[0]
                h = Http(self.port, {"Authorization": f"token {self.token}"})
                try:
                    if h.request("GET", "/api/status")[0] == 200:
                        break
                except OSError:
                    pass
                finally:
                    h.close()
            time.sleep(0.05)
        self.http = Http(self.port, {"Authorization": f"token {self.token}"})

    def tail(self, n=2000):
        with open(self.log_path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")

    def start_kernel(self, name):
        k = self.http.json("POST", "/api/kernels", {"name": name}, expect=(201,))
        return k["id"]

    def shutdown_kernel(self, kernel_id):
        self.http.json("DELETE", f"/api/kernels/{kernel_id}", expect=(204,))

    def websocket(self, kernel_id, nodelay=False):
        return KernelWebsocket(self, kernel_id, nodelay)

    def stop(self):
        self.http.close()
        stop(self.proc)
        self.log.close()


class KernelWebsocket:
    """A client of Jupyter Server's /api/kernels/{id}/channels (websocket-client)."""

    def __init__(self, server, kernel_id, nodelay=False):
        import websocket  # python3-websocket

        self.session = uuid.uuid4().hex
        url = f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels?session_id={self.session}"
        if nodelay:
            url += "&nodelay=1"
        self.ws = websocket.create_connection(
            url, header=[f"Authorization: token {server.token}"], timeout=120)

    def execute(self, code):
        msg_id = uuid.uuid4().hex
        msg = {
            "header": {"msg_id": msg_id, "username": "bench", "session": self.session,
                       "msg_type": "execute_request", "version": "5.3",
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }
        t0 = time.perf_counter()
        self.ws.send(json.dumps(msg))
        replied = idle = False
        deadline = t0 + 60
        while not (replied and idle):
            if time.perf_counter() > deadline:
                raise TimeoutError("websocket run: no reply/idle")
            m = json.loads(self.ws.recv())
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            t = m["msg_type"]
            if t == "execute_reply":
                replied = True
            elif t == "status" and m["content"]["execution_state"] == "idle":
                idle = True
        return time.perf_counter() - t0

    def close(self):
        self.ws.close()


# ---- jupyter_client -----------------------------------------------------------


class JupyterClientKernel:
    """KernelManager + BlockingKernelClient; runs with execute_interactive."""

    def __init__(self, name, workdir, transport="ipc"):
        from jupyter_client import KernelManager

        os.makedirs(workdir, mode=0o700, exist_ok=True)
        import shutil
        import tempfile

        kw = {"kernel_name": name, "transport": transport}
        self.ipc_dir = None
        if transport == "ipc":  # short: xeus kernels refuse long ipc endpoints
            self.ipc_dir = tempfile.mkdtemp(prefix="kb", dir="/tmp")
            self._rmtree = shutil.rmtree
            kw["ip"] = os.path.join(self.ipc_dir, "j")
        kw["connection_file"] = os.path.join(workdir, "jc-kernel.json")
        self.km = KernelManager(**kw)
        LIVE_JC.add(self)
        self.kc = None
        self.km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def execute(self, code):
        t0 = time.perf_counter()
        reply = self.kc.execute_interactive(code, timeout=60, output_hook=_ignore)
        dt = time.perf_counter() - t0
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"execute_interactive: {reply['content']}")
        return dt

    def shutdown(self, now=False):
        LIVE_JC.discard(self)
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=now)
        if self.ipc_dir:
            self._rmtree(self.ipc_dir, ignore_errors=True)


def _ignore(msg):
    pass


def jc_start_new_kernel(name):
    """jupyter_client.manager.start_new_kernel, timed; returns (seconds, km, kc)."""
    from jupyter_client.manager import start_new_kernel

    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name=name, startup_timeout=60,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, km, kc
