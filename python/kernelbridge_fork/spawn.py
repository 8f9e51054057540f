"""The fork itself: a double fork, so the new kernel is no child of the
kernel it was forked from (it is adopted by the nearest child subreaper, the
daemon, or by init), with a status pipe on which the child answers once its
sockets are bound, or says why it could not start."""

import json
import os
import select
import signal
import sys
import time

from kernelbridge_fork.compat import ForkFailed, ForkRefused, running_kernel

PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


MANY_MAX = 64  # forks of one fork_many()


class ForkResult:
    """What a fork answers: the new process's pid. Its repr is the pid (the
    execute_reply's text/plain) and its JSON form {"pid": N}."""

    def __init__(self, pid, middle=None):
        self.pid = pid
        self.middle = middle  # the intermediate process, when the caller reaps it
        self.answered = None  # a frozen process's fork: its answer pipe (frozen.py)

    def reap(self):
        """Reap the intermediate process (an early answer left it)."""
        middle, self.middle = self.middle, None
        _reap(middle)

    def __repr__(self):
        return str(self.pid)

    def _repr_json_(self):
        return {"pid": self.pid}


class ForkResults:
    """What fork_many answers: the new processes' pids, in the order of the
    connections. Its JSON form is {"pids": [N, ...]}."""

    def __init__(self, pids):
        self.pids = list(pids)

    def __repr__(self):
        return " ".join(str(pid) for pid in self.pids)

    def _repr_json_(self):
        return {"pids": self.pids}


def fork_many(connections, *, timeout=30.0):
    """Fork this idle ipykernel into one new kernel per connection, all
    started before any is waited for, so that their start-ups overlap.
    Returns a ForkResults once every one is listening; when any fails, all
    are killed and ForkFailed says why (nothing is left running)."""
    if not isinstance(connections, list) or not 1 <= len(connections) <= MANY_MAX:
        raise ForkRefused(f"connections must be a list of 1 to {MANY_MAX} connection dicts")
    infos = [checked_connection(c) for c in connections]
    app, kernel, shell = running_kernel()
    from kernelbridge_fork import child

    def becoming(info):
        def become(ready):
            child.leave_parent(app, kernel, shell)
            child.run_kernel(app, kernel, shell, info, ready)
        return become

    started = []
    try:
        for info in infos:
            started.append((_start(becoming(info), shell.history_manager)[0], {}))
        pids = [_await_child(rfd, timeout, seen) for rfd, seen in started]
    except BaseException:
        for rfd, seen in started:
            _drain_pid(rfd, seen)
            _kill(seen.get("pid"))
        raise
    finally:
        for rfd, _ in started:
            os.close(rfd)
    return remember(ForkResults(pids))


def fork(connection, *, timeout=30.0):
    """Fork this idle ipykernel into a new kernel listening on `connection`
    (a connection-file dict: transport, ip, the five ports, key,
    signature_scheme). Returns a ForkResult once the new kernel's sockets are
    bound; raises ForkRefused or ForkFailed."""
    info = checked_connection(connection)
    app, kernel, shell = running_kernel()
    from kernelbridge_fork import child

    def become(ready):
        child.leave_parent(app, kernel, shell)
        child.run_kernel(app, kernel, shell, info, ready)

    return remember(spawn(become, shell.history_manager, timeout))


def remember(result):
    sys.modules["kernelbridge_fork"].last = result
    return result


def checked_connection(connection):
    """The connection info, checked before anything is forked."""
    if not isinstance(connection, dict):
        raise ForkRefused("the connection info must be a dict")
    info = dict(connection)
    transport = info.get("transport", "tcp")
    if transport not in ("tcp", "ipc"):
        raise ForkRefused(f"unknown transport {transport!r}")
    for name in PORT_NAMES:
        port = info.get(name)
        if not isinstance(port, int) or isinstance(port, bool) or port <= 0:
            raise ForkRefused(f"{name} must be a positive integer chosen by the caller")
    key = info.get("key")
    if not isinstance(key, str) or not key:
        raise ForkRefused("the connection info must carry a new, non-empty key")
    if not isinstance(info.get("ip", "127.0.0.1"), str):
        raise ForkRefused("ip must be a string")
    info.setdefault("signature_scheme", "hmac-sha256")
    info["transport"] = transport
    return info


def spawn(become, history, timeout, early=False):
    """Fork twice and run become(ready) in the grandchild, which must call
    ready() once it is listening. Returns ForkResult(pid of the grandchild);
    with early, as soon as the grandchild exists (the caller then learns
    that it is ready, or that it failed, from the kernel itself), and
    before the intermediate process is reaped: the caller answers first,
    then calls the result's reap().
    The history's cache locks are held across the fork, so that IPython's
    history thread is not in the middle of an sqlite write when the memory
    is copied."""
    rfd, middle = _start(become, history, reap=not early)
    seen = {}
    try:
        return ForkResult(_await_child(rfd, timeout, seen, early), middle)
    except BaseException:
        # Interrupted while waiting (or the child failed): no child runs on.
        _kill(seen.get("pid"))
        _reap(middle)
        raise
    finally:
        os.close(rfd)


def _start(become, history, reap=True):
    """Fork the intermediate process, which forks the kernel-to-be and
    exits; reap it (or not: its pid is returned). Returns the status
    pipe's read end (the caller's) and the pid left to reap, or None."""
    rfd, wfd = os.pipe()
    try:
        with history.db_input_cache_lock, history.db_output_cache_lock:
            middle = os.fork()
            if middle == 0:
                _middle(rfd, wfd, become)
    finally:
        os.close(wfd)
    if not reap:
        return rfd, middle
    try:
        os.waitpid(middle, 0)
    except BaseException:
        os.close(rfd)
        raise
    return rfd, None


def _reap(pid):
    if pid is None:
        return
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _drain_pid(rfd, seen):
    """Read what the pipe holds now, for the pid a failed start left."""
    try:
        while select.select([rfd], [], [], 0)[0]:
            chunk = os.read(rfd, 4096)
            if not chunk:
                return
            for line in chunk.split(b"\n"):
                if line.strip():
                    msg = json.loads(line)
                    seen["pid"] = msg.get("pid", msg.get("spawned", seen.get("pid")))
    except (OSError, ValueError):
        pass


def _middle(rfd, wfd, become):
    """The intermediate process: forks the kernel-to-be, names it, exits."""
    try:
        os.close(rfd)
        pid = os.fork()
        if pid == 0:
            _grandchild(wfd, become)
        _write(wfd, {"spawned": pid})
    finally:
        os._exit(0)


class _Reporter:
    """The grandchild's side of the status pipe: one answer, then closed."""

    def __init__(self, fd):
        self.fd = fd

    def say(self, message):
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            _write(fd, dict(message, pid=os.getpid()))
        except OSError:
            pass  # an early caller stopped listening after the pid: the kernel goes on
        finally:
            os.close(fd)

    def ready(self):
        self.say({"ready": True})


def _grandchild(wfd, become):
    """Never returns: the parent's call stack below us belongs to the parent."""
    status = 1
    reporter = _Reporter(wfd)
    try:
        os.setsid()
        become(reporter.ready)
        status = 0
    except BaseException as e:  # noqa: BLE001 - reported, then the process ends
        try:
            reporter.say({"error": f"{type(e).__name__}: {e}"})
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(status)


def _write(fd, message):
    os.write(fd, (json.dumps(message) + "\n").encode())


def _await_child(rfd, timeout, seen, early=False):
    """The grandchild's pid once it is ready (with early: once it exists);
    its pid goes into `seen` as soon as it is known, so that whoever gives
    up can kill it."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([rfd], [], [], left)[0]:
            raise ForkFailed(f"the child did not become ready within {timeout} s; killed")
        chunk = os.read(rfd, 4096)
        if not chunk:
            raise ForkFailed("the child exited before it was ready")
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            seen["pid"] = msg.get("pid", msg.get("spawned", seen.get("pid")))
            if "error" in msg:
                raise ForkFailed(f"the child could not become a kernel: {msg['error']}")
            if msg.get("ready"):
                return msg["pid"]
            if early and msg.get("spawned"):
                return msg["spawned"]


def _kill(pid):
    if pid is None:
        return
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _wait_gone(pid)


def _wait_gone(pid, limit=5.0):
    """Wait until the failed child has exited (gone, or a zombie left for its
    new parent to reap), so a ForkFailed means no process runs on."""
    deadline = time.monotonic() + limit
    while pid is not None and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.005)
