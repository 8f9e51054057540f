"""What the new process does to become a whole, clean ipykernel.

It is a copy of a kernel that is in the middle of a cell (the fork() call):
the parent's threads are gone, its sockets and event loop are copies nobody
serves, stdout/stderr point into the parent's pipes, and the singletons name
the parent's application and kernel. Each is undone here at its cause; the
shell (namespace, history lists, execution count, everything registered on
it) is kept and handed to a new kernel application."""

import asyncio
import copy
import gc
import logging
import os
import random
import signal
import stat
import sys

from ipykernel.kernelapp import IPKernelApp
from traitlets import Dict

# /proc/self/fd targets that are the parent's kernel machinery (zmq sockets,
# the event loops' epoll and eventfd descriptors) or network connections.
_NOT_CARRIED = ("socket:", "anon_inode:[eventfd]", "anon_inode:[eventpoll]",
                "anon_inode:[timerfd]", "anon_inode:[signalfd]")


class ForkedKernelApp(IPKernelApp):
    """An IPKernelApp that takes its connection from a dict (the caller keeps
    the connection info, so no connection file is written) and runs no
    startup code and loads no extension: the shell it carries already ran
    and loaded them."""

    connection_info = Dict()

    def parse_command_line(self, argv=None):
        """No command line: the configuration is the parent's (building the
        argument parser was a third of the start-up time)."""

    def init_connection_file(self):
        self.load_connection_info(self.connection_info)

    def write_connection_file(self):
        pass

    def init_extensions(self):
        pass

    def init_code(self):
        pass


def reseed():
    """Forks must not repeat each other's random numbers."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def release_inherited_fds(extra_pipes=()):
    """Point the parent's sockets, epoll/eventfd descriptors and output
    pipes at /dev/null. The numbers stay taken, so an object that still
    holds one can never close a descriptor opened later; the parent's
    listening ports are released."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd <= 2 or fd == null:
                continue
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
                mode = os.fstat(fd)
            except OSError:
                continue
            pipe = stat.S_ISFIFO(mode.st_mode) and mode.st_ino in extra_pipes
            if pipe or target.startswith(_NOT_CARRIED):
                os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


# The parent's sys.stdout and sys.stderr, by name, kept (also across a
# frozen fork) so that what still holds them can be pointed at the new ones.
_parent_streams = {}


def restore_stdio():
    """ipykernel's OutStreams point fds 1 and 2 into pipes that the parent's
    threads read; put back the process's own stdout and stderr. Returns the
    inodes of those pipes."""
    pipes = set()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        _parent_streams[name] = stream
        try:
            original = stream.fileno() if stream is not getattr(sys, f"__{name}__") else None
        except (OSError, ValueError, AttributeError):
            original = None
        if original is not None and original != fd:
            mode = os.fstat(fd)
            if stat.S_ISFIFO(mode.st_mode):
                pipes.add(mode.st_ino)
            os.dup2(original, fd)
        setattr(sys, name, getattr(sys, f"__{name}__"))
    return pipes


def leave_parent(app, kernel, shell):
    """Once, in a fresh copy of a running kernel: quiet the copies of the
    parent's I/O, leave the cell the parent was running, own the history."""
    reseed()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    release_inherited_fds(restore_stdio())
    # The cell that called fork() entered these and will never leave them here.
    shell.display_trap.__exit__(None, None, None)
    shell.builtin_trap.__exit__(None, None, None)
    kernel._restore_input()
    own_history(shell)


def _memory_history(shell):
    from IPython.core.history import HistoryManager

    return HistoryManager(shell=shell, parent=shell, hist_file=":memory:")


def own_history(shell):
    """An in-memory history holding the parent's session so far: In, Out and
    %history read as in the parent, and the sqlite file the parent writes is
    never written from here. In a kernel forked from a template, the one
    the template made for it (see prepare): its in-memory database has no
    file, lock or thread that a fork could share."""
    old = shell.history_manager
    new = _prepared.pop("history", None) or _memory_history(shell)
    new.input_hist_parsed[:] = old.input_hist_parsed
    new.input_hist_raw[:] = old.input_hist_raw
    new.output_hist.update(old.output_hist)
    new.output_hist_reprs.update(old.output_hist_reprs)
    new.dir_hist[:] = old.dir_hist
    shell.history_manager = new
    ns = {"_ih": new.input_hist_parsed, "In": new.input_hist_parsed,
          "_oh": new.output_hist, "Out": new.output_hist, "_dh": new.dir_hist}
    shell.user_ns.update(ns)
    shell.user_ns_hidden.update(ns)


def checked_setup(msg):
    """A template's request: the new context's cwd (absolute, or None) and
    env (names to string values), checked before anything is forked."""
    cwd, env = msg.get("cwd"), msg.get("env") or {}
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
        raise ValueError("cwd must be an absolute path")
    if cwd is not None and not os.path.isdir(cwd):
        raise ValueError(f"{cwd} is not a directory")
    if not isinstance(env, dict) or not all(isinstance(k, str) and k and "=" not in k
                                            and isinstance(v, str) for k, v in env.items()):
        raise ValueError("env must map names to strings")
    return {"cwd": cwd, "env": env}


def apply_setup(shell, setup):
    """What a started kernel gets from its launch: its working directory
    (IPython's directory history starts there) and its environment."""
    os.environ.update(setup["env"])
    if setup["cwd"] is not None:
        os.chdir(setup["cwd"])
    shell.history_manager.dir_hist[:] = [os.getcwd()]


def fresh_loop():
    """The parent's asyncio loop is running in a frame below us and can never
    run here: make a new one the current loop."""
    asyncio._set_running_loop(None)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)


# What a frozen process prepares once for every kernel it forks (a copy
# of the configuration: deep-copying it was a third of new_app's time).
_prepared = {}


def prepared_config(old_app):
    """The parent's configuration for a new application; parent_handle 1
    ("adopted by init"): no parent poller, since a fork outlives the kernel
    it came from and belongs to whoever adopts it."""
    config = copy.deepcopy(old_app.config)
    config.ForkedKernelApp.parent_handle = 1
    return config


def prepare(old_app, shell, template=False):
    """In a frozen process, before it forks kernels: what each would make
    (a configuration). A template also makes the empty in-memory history
    each fork takes (making one took a fifth of a fork's start-up; a
    checkpoint, made before each run that may roll back and seldom
    restored, does not pay for it), and moves its objects (the imported
    modules: they live as long as the process) out of the garbage
    collector's reach (gc.freeze), so that a collection in a fork does not
    walk, and so copy, every page of the template's heap. Not for a
    checkpoint: cyclic garbage made before it would never be collected in
    the kernels restored from it."""
    _prepared["config"] = prepared_config(old_app)
    if template:
        _prepared["history"] = _memory_history(shell)
        gc.collect()
        gc.freeze()


def new_app(old_app, old_kernel, info):
    """A new IPKernelApp singleton, configured like the parent, on `info`."""
    type(old_app).clear_instance()
    type(old_kernel).clear_instance()
    config = _prepared.pop("config", None) or prepared_config(old_app)
    return ForkedKernelApp.instance(config=config, connection_info=info,
                                    kernel_class=type(old_kernel), parent_handle=1)


def retarget_logging():
    """A logging handler made in the parent (logging.basicConfig() in a cell)
    holds the parent's OutStream, whose session refuses to send from another
    process: point it at this kernel's stream of the same name."""
    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            for name, old in _parent_streams.items():
                if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                    handler.setStream(getattr(sys, name))


def remove_bound_ipc(app):
    """After a failed start, remove the ipc socket files this process bound
    (and only those: a path in use belongs to someone else)."""
    if app.transport != "ipc":
        return
    for name in ("shell", "stdin", "control", "iopub"):
        if getattr(app, f"{name}_socket", None) is not None:
            try:
                os.remove(f"{app.ip}-{getattr(app, f'{name}_port')}")
            except OSError:
                pass


def usable_cwd():
    """A checkpoint can outlive its working directory (removed since it was
    made): the new kernel then starts in HOME, or /, as IPython cannot
    start where os.getcwd() fails."""
    try:
        os.getcwd()
    except FileNotFoundError:
        home = os.path.expanduser("~")
        os.chdir(home if os.path.isdir(home) else "/")


def run_kernel(old_app, old_kernel, shell, info, ready):
    """Become a kernel on `info`; call ready() once listening; return when
    the kernel shuts down."""
    release_inherited_fds()
    fresh_loop()
    usable_cwd()
    app = new_app(old_app, old_kernel, info)
    try:
        app.initialize([])
    except BaseException:
        remove_bound_ipc(app)
        raise
    retarget_logging()
    shell.kernel = app.kernel
    shell.parent = app.kernel
    data_pub = getattr(shell, "_data_pub", None)
    if data_pub is not None:
        data_pub.session, data_pub.pub_socket = app.session, app.iopub_socket
    ready()
    try:
        app.start()
    finally:
        app.close()
