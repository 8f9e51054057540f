"""Helpers of the fork tests: real ipykernels driven with jupyter_client, a
parent started by a KernelManager with python/ on its path, and forks
reached from the connection info the test chose. (A module of its own name:
several suites run in one pytest process, each with a conftest.py.)"""

import atexit
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid

from jupyter_client import BlockingKernelClient
from jupyter_client.manager import KernelManager

PACKAGE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))
if PACKAGE_DIR not in sys.path:
    sys.path.insert(0, PACKAGE_DIR)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from outside_testlib import PORT_NAMES, free_tcp_ports  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
TIMEOUT = 30


_ipc_dir = None


def new_connection(transport="ipc"):
    """A new connection for a fork: ipc sockets in this process's private
    directory (the daemon's transport), or TCP ports on 127.0.0.1."""
    global _ipc_dir
    info = {"transport": transport, "key": uuid.uuid4().hex, "signature_scheme": "hmac-sha256"}
    if transport == "ipc":
        if _ipc_dir is None:
            _ipc_dir = tempfile.mkdtemp(prefix="kb-fork-test-")
            atexit.register(shutil.rmtree, _ipc_dir, True)
        info["ip"] = os.path.join(_ipc_dir, uuid.uuid4().hex[:12])
        ports = range(1, 6)
    else:
        info["ip"] = "127.0.0.1"
        ports = free_tcp_ports(5)
    info.update(zip(PORT_NAMES, ports))
    return info


def execute(kc, code, *, silent=False, user_expressions=None, stdin_reply=None, timeout=TIMEOUT):
    """Run `code`; returns (reply content, [iopub messages of this request])."""
    msg_id = kc.execute(code, silent=silent, store_history=not silent,
                        user_expressions=user_expressions or {}, allow_stdin=stdin_reply is not None)
    if stdin_reply is not None:
        req = kc.get_stdin_msg(timeout=timeout)
        assert req["msg_type"] == "input_request"
        kc.input(stdin_reply)
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    outputs = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        outputs.append(msg)
    return reply["content"], outputs


def value(kc, expr):
    """The text/plain of `expr` in the kernel, read without running a cell."""
    content, _ = execute(kc, "", silent=True, user_expressions={"v": expr})
    assert content["status"] == "ok", content
    got = content["user_expressions"]["v"]
    assert got["status"] == "ok", got
    return got["data"]["text/plain"]


def stdout_of(outputs):
    return "".join(m["content"]["text"] for m in outputs
                   if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")


def ask_fork(kc, call):
    """Send the daemon's fork request; returns the reply content. A fork
    publishes nothing; a refusal publishes only its error."""
    content, outputs = execute(kc, f"__import__('kernelbridge_fork').{call}", silent=True,
                               user_expressions={"fork": "__import__('kernelbridge_fork').last"})
    allowed = ("status",) if content["status"] == "ok" else ("status", "error")
    assert not [m for m in outputs if m["msg_type"] not in allowed], outputs
    return content


def wait_exit(pid, limit=10.0):
    """Wait for a child of ours to exit by itself and reap it: its exit
    status, or None if it still runs."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    return None


def connect(info):
    kc = BlockingKernelClient()
    kc.load_connection_info(info)
    kc.start_channels()
    kc.wait_for_ready(timeout=TIMEOUT)
    return kc


def reap(pid, limit=10.0):
    """Kill the fork's process group and reap it; True once it is gone."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            return not os.path.exists(f"/proc/{pid}")
        time.sleep(0.01)
    return False


class Fork:
    """One fork: its pid, its connection info and a client on it."""

    def __init__(self, pid, info, kc):
        self.pid, self.info, self.kc = pid, info, kc


class Forks:
    """Makes forks and removes them (process and group) after the test."""

    def __init__(self):
        self.made = []
        self.pids = []

    def of(self, kc, *, info=None):
        info = info or new_connection()
        content = ask_fork(kc, f"fork({info!r})")
        assert content["status"] == "ok", content
        pid = content["user_expressions"]["fork"]["data"]["application/json"]["pid"]
        return self.adopt(pid, info)

    def adopt(self, pid, info):
        self.pids.append(pid)
        fork = Fork(pid, info, connect(info))
        self.made.append(fork)
        return fork

    def close(self):
        for fork in self.made:
            fork.kc.stop_channels()
        for pid in self.pids:
            reap(pid)


def our_children():
    pid = os.getpid()
    kids = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.update(int(p) for p in f.read().split())
        except FileNotFoundError:  # a thread that ended since the listing
            continue
    return kids


def subreaper(on):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def start_parent(extra_env=None):
    km = KernelManager(kernel_name="python3")
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTEST_CURRENT_TEST", None)
    env.update(extra_env or {})
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=TIMEOUT)
    return km, kc
