"""Frozen forks (checkpoints): a fork that runs nothing and holds only the
pages that diverge, waiting on a unix socket (its path chosen by the caller)
for "fork now with this connection info"; each request makes a new kernel
from it and answers the new pid. The frozen process stays, and can be asked
again."""

import importlib
import json
import os
import signal
import socket
import threading

from kernelbridge_fork.compat import ForkFailed, ForkRefused, running_kernel
from kernelbridge_fork.spawn import ForkResult, checked_connection, remember, spawn

MAX_REQUEST = 64 * 1024

# How often a frozen process looks whether its socket is still in place: a
# daemon that is gone for good (its state dir removed, the socket unlinked
# or replaced) leaves no process waiting forever.
ORPHAN_CHECK_S = 10.0


def freeze(path, *, timeout=30.0, fresh=False):
    """Fork this idle ipykernel into a frozen process listening on the unix
    socket `path` (which must not exist). Returns a ForkResult (the frozen
    process's pid) once it listens; SIGTERM makes it remove `path` and exit."""
    if not isinstance(path, str) or not path:
        raise ForkRefused("the socket path must be a non-empty string")
    if os.path.lexists(path):
        raise ForkRefused(f"{path} exists already")
    app, kernel, shell = running_kernel()
    from kernelbridge_fork import child

    def become(ready):
        child.leave_parent(app, kernel, shell)
        child.prepare(app, shell, template=fresh)  # once: each kernel forked from here has it
        _serve(path, ready,
               lambda info, msg: _fork_from_frozen(app, kernel, shell, info, msg, fresh))

    return remember(spawn(become, shell.history_manager, timeout))


def template(path, modules=(), *, timeout=30.0):
    """Make this pristine ipykernel (no cell run yet) the template of new
    contexts: import `modules` (into sys.modules only: no name is bound in
    the user's namespace; an import that fails raises its own error and
    nothing is frozen), then freeze it on `path` like a checkpoint. Each
    request to it may carry the new context's "cwd" and "env", and
    "early": answer the pid as soon as the process exists, without waiting
    for its sockets (the caller waits for kernel_info itself)."""
    if isinstance(path, dict):  # the daemon's request: {"path": ..., "modules": [...]}
        path, modules = path.get("path"), path.get("modules", [])
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) and m for m in modules):
        raise ForkRefused("modules must be a list of module names")
    for name in modules:
        importlib.import_module(name)
    return freeze(path, timeout=timeout, fresh=True)


def request(path, connection, *, timeout=30.0):
    """Ask the frozen process at `path` for a kernel on `connection`.
    Returns a ForkResult; raises ForkFailed with the reason."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout + 5)
        s.connect(path)
        s.sendall((json.dumps({"connection": connection, "timeout": timeout}) + "\n").encode())
        answer = _read_line(s)
    if "error" in answer:
        raise ForkFailed(answer["error"])
    return ForkResult(answer["pid"])


def _fork_from_frozen(app, kernel, shell, info, msg, fresh):
    """A kernel forked from this frozen process, with the write end of its
    answer pipe (see _live_if_answered): the caller writes to it once the
    pid reached the asker."""
    from kernelbridge_fork import child

    timeout = float(msg.get("timeout", 30.0))
    setup = child.checked_setup(msg) if fresh else None
    answered_r, answered_w = os.pipe()

    def become(ready):
        os.close(answered_w)
        _live_if_answered(answered_r)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the checkpoint's socket is not ours
        child.reseed()
        # The history locks were held across the fork: a history of its own.
        child.own_history(shell)
        if setup is not None:
            child.apply_setup(shell, setup)
        child.run_kernel(app, kernel, shell, info, ready)

    try:
        result = spawn(become, shell.history_manager, timeout,
                       early=fresh and bool(msg.get("early")))
    except BaseException:
        os.close(answered_w)
        raise
    finally:
        os.close(answered_r)
    result.answered = answered_w
    return result


def _live_if_answered(fd):
    """In the new kernel: live only if its pid reached the asker. The frozen
    process writes one byte on the pipe once its answer is sent; the end of
    the pipe before that byte (the frozen process killed between the fork
    and its answer, or the asker gone) means that nobody knows this process,
    which then ends itself rather than run on unowned."""

    def wait():
        try:
            got = os.read(fd, 1)
        except OSError:
            got = b""
        os.close(fd)
        if got != b"1":
            os._exit(1)

    threading.Thread(target=wait, name="kernelbridge-answered", daemon=True).start()


def _serve(path, ready, fork_one):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    try:
        listener.listen(16)
        os.chmod(path, 0o600)

        def leave(signum, frame):
            _unlink(path)
            os._exit(0)

        signal.signal(signal.SIGTERM, leave)
        bound = os.stat(path)
        listener.settimeout(ORPHAN_CHECK_S)
        ready()
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if not _same_file(path, bound):
                    os._exit(0)  # nobody can reach it any more
                continue
            with conn:
                _answer(conn, fork_one)
    finally:
        _unlink(path)


def _answer(conn, fork_one):
    result = None
    try:
        conn.settimeout(10)
        msg = _read_line(conn)
        info = checked_connection(msg.get("connection"))
        conn.settimeout(float(msg.get("timeout", 30.0)) + 5)
        result = fork_one(info, msg)
        reply = {"pid": result.pid}
    except Exception as e:  # noqa: BLE001 - each request answers, the checkpoint stays
        reply = {"error": f"{type(e).__name__}: {e}"}
    # The asker may end this process (SIGTERM) as soon as it has the answer,
    # as a rollback does with its checkpoint: held until the new kernel is
    # told, or it would end the kernel just handed out.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        sent = False
        try:
            conn.sendall((json.dumps(reply) + "\n").encode())
            sent = True
        except OSError:
            pass
        if result is not None:
            _tell_answered(result.answered, sent)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if result is not None:
        result.reap()  # after the answer: the caller does not wait for it


def _tell_answered(fd, sent):
    """The new kernel lives on only when its pid was sent (_live_if_answered)."""
    try:
        if sent:
            os.write(fd, b"1")
    except OSError:
        pass  # the kernel is gone already
    finally:
        os.close(fd)


def _read_line(conn):
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk or len(buf) > MAX_REQUEST:
            raise ForkFailed("the peer closed the connection before a whole line")
        buf += chunk
    return json.loads(buf.split(b"\n", 1)[0])


def _same_file(path, bound):
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino)


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass
