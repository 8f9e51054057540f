"""`kernelbridge serve` for a bench: the one Daemon class every module uses.

A daemon listens on 127.0.0.1:<ephemeral> (found through --port-file), in
a private work dir (its port file and log, removed when the daemon is
stopped if this class made it), with a private state dir (or none:
`ephemeral`), an environment without KB_* (only the flags given count),
and is registered with procs.STARTED so that procs.stop_all() stops it.

Not for: the daemon's peers (peers.py), timed requests (calls.py).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

from . import procs
from .httpclient import Http

NO_POOL = ("--pool", "python=0")  # the daemon alone: no pre-started kernel


class Daemon:
    """One `kernelbridge serve`; `listening_s` is the time from spawn to its port file."""

    def __init__(self, binary: str, workdir: str | None = None, extra_args: tuple[str, ...] = (),
                 *, state_dir: str | None = None, ephemeral: bool = False,
                 env: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        self.own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="kbd-", dir="/tmp")
        os.makedirs(self.workdir, mode=0o700, exist_ok=True)
        self.state_dir = None if ephemeral else (state_dir or os.path.join(self.workdir, "state"))
        self.port_file = os.path.join(self.workdir, "port")
        self.log_path = os.path.join(self.workdir, "daemon.log")
        self.log = open(self.log_path, "wb")
        where = ["--ephemeral"] if ephemeral else ["--state-dir", self.state_dir]
        argv = [os.path.abspath(binary), "serve", "--listen", "127.0.0.1:0", "--port-file", self.port_file,
                *where, *extra_args]
        clean = {k: v for k, v in (env or os.environ).items() if not k.startswith("KB_")}
        self.started = time.perf_counter()
        self.proc = procs.spawn(argv, stdout=self.log, stderr=self.log, env=clean, cwd=self.workdir)
        self.pid = self.proc.pid
        self.port = self._wait_port(timeout)
        self.listening_s = time.perf_counter() - self.started
        self.http = Http(self.port)

    def _wait_port(self, timeout: float) -> int:
        deadline = time.perf_counter() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.tail()}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"daemon did not write its port file: {self.tail()}")
            try:
                with open(self.port_file) as f:
                    return int(f.read().strip())
            except (FileNotFoundError, ValueError):
                time.sleep(0.002)

    def tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    # ---- requests ------------------------------------------------------------

    def ok(self, method: str, path: str, body: object = None) -> Any:
        """One request on the daemon's own connection; its JSON, unless not 2xx."""
        return self.http.json(method, path, body)

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
            time.sleep(0.02)
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
            if self.state_dir and a.startswith(self.state_dir) and a.endswith(".json"):
                return a
        return None

    def delete_context(self, ctx: dict[str, Any], http: Http | None = None,
                       wait: bool = True) -> None:
        (http or self.http).json("DELETE", f"/contexts/{ctx['context_id']}", expect=(204,))
        if wait and ctx.get("pid"):
            procs.pid_gone(ctx["pid"])

    def status(self) -> dict[str, int]:
        return procs.proc_status(self.pid)

    # ---- the end -------------------------------------------------------------

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the daemon shuts its kernels down), SIGKILL after timeout. Safe twice."""
        self.http.close()
        procs.stop(self.proc, timeout)
        self._done()

    close = stop

    def crash(self) -> None:
        """SIGKILL the daemon alone: its kernels (sessions of their own) live on."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        if self.proc in procs.STARTED:
            procs.STARTED.remove(self.proc)
        self._done()

    def _done(self) -> None:
        if not self.log.closed:
            self.log.close()
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def processes_left(self) -> list[int]:
        """Pids of the processes whose command line names a file in this daemon's
        state dir: its kernels (each in a session of its own, so not reached by
        a signal to the daemon's process group)."""
        return procs.pids_naming(self.state_dir + "/") if self.state_dir else []

    def kill_processes_left(self) -> list[int]:
        """SIGKILL the process group of every process left (processes_left) and
        wait until each is gone; returns their pids."""
        left = self.processes_left()
        procs.kill_groups(left)
        for pid in left:
            procs.pid_gone(pid, 10.0)
        return left


def kill_kernels(state_dir: str) -> list[int]:
    """SIGKILL every live kernel started from state_dir (by any daemon)."""
    pids = procs.pids_naming(state_dir + "/kernels/", zombies=False)
    procs.kill_groups(pids)
    return pids
