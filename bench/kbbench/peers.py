"""kernelbridge's peers, measured beside it on the same kernels: Jupyter
Server (as shipped, or with TCP_NODELAY per websocket: jupyter_server_launch.py)
with a websocket client of its kernels, and jupyter_client.

Every process started goes through procs.spawn (stopped by procs.stop_all);
jupyter_client kernels not yet shut down are in LIVE_JC.

Not for: the daemon (daemon.py), the raw floor client (raw.py).
"""

import json
import os
import subprocess
import sys
import time
import uuid

from . import procs
from .httpclient import Http

LIVE_JC: set["JupyterClientKernel"] = set()  # JupyterClientKernels not yet shut down


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
        self.proc = procs.spawn(argv, stdout=self.log, stderr=self.log, env=env)
        deadline = time.perf_counter() + 60
        self.port = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {self.tail()}")
            if time.perf_counter() > deadline:
                raise RuntimeError("jupyter server did not listen")
            ports = procs.listening_ports(self.proc.pid)
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
        procs.stop(self.proc)
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
