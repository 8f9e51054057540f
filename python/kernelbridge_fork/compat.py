"""The contract with ipykernel and IPython: the versions this code knows, and
the objects of the running kernel it works on. On anything else it refuses
before forking, never half-works."""

import sys
import threading

# (package, major.minor) pairs the fork was written against and tested on.
TESTED = {"ipykernel": ("6.17",), "IPython": ("8.5",)}


class ForkError(Exception):
    """A fork that did not happen; the message says why."""


class ForkRefused(ForkError):
    """This process cannot be forked (not an ipykernel, an unknown version,
    not between runs); nothing was started."""


class ForkFailed(ForkError):
    """The child could not become a kernel; it has exited and left no
    process and no file behind."""


def _minor(version):
    return ".".join(str(version).split(".")[:2])


def check_versions():
    """Raise ForkRefused unless ipykernel and IPython are versions we know."""
    for name, known in TESTED.items():
        mod = sys.modules.get(name)
        if mod is None:
            raise ForkRefused(f"not running in an ipykernel ({name} is not loaded)")
        version = getattr(mod, "__version__", "unknown")
        if _minor(version) not in known:
            raise ForkRefused(f"{name} {version} is not a version kernelbridge_fork knows "
                              f"(tested on {name} {', '.join(known)})")


def running_kernel():
    """The kernel application, kernel and shell of this process, checked:
    (app, kernel, shell). Raises ForkRefused."""
    check_versions()
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp
    from ipykernel.zmqshell import ZMQInteractiveShell

    if not IPKernelApp.initialized():
        raise ForkRefused("not running in an ipykernel (no IPKernelApp)")
    app = IPKernelApp.instance()
    kernel = getattr(app, "kernel", None)
    if not isinstance(kernel, IPythonKernel):
        raise ForkRefused(f"the kernel is a {type(kernel).__name__}, not an IPythonKernel")
    shell = kernel.shell
    if not isinstance(shell, ZMQInteractiveShell):
        raise ForkRefused(f"the shell is a {type(shell).__name__}, not a ZMQInteractiveShell")
    if getattr(app, "trio_loop", False):
        raise ForkRefused("the kernel runs a trio loop, which the fork does not rebuild")
    if threading.current_thread() is not threading.main_thread():
        raise ForkRefused("fork() must be called from the kernel's main thread")
    return app, kernel, shell
