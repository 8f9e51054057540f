"""The kernel's output waits for the daemon instead of being dropped.

ipykernel publishes on a PUB socket, and a PUB socket drops what does not
fit in its queue to a subscriber that reads too slowly (its SNDHWM),
without a word. The daemon bounds what it holds of a kernel's unread
output by bytes: its socket's receive queue (RCVHWM) holds a few messages
of such a kernel (about 2 MiB), so that ZeroMQ stops reading that
kernel's connection when the daemon is behind, and the rest waits on the
kernel's side. That is only safe where the kernel waits too instead of
dropping, so this module:

- sets ZMQ_XPUB_NODROP on the kernel's iopub socket (a full queue makes the
  kernel's IOPub thread wait, as a full pipe would), with a short send
  queue (SNDHWM) so that what waits stays in the kernel's own output
  buffers, which its memory limit counts;
- says so in the kernel's ``kernel_info_reply`` (``"kernelbridge":
  {"iopub_nodrop": true}``); the daemon bounds its queue only for a kernel
  that says so, and keeps its large queue for any other.

Both are set at the classes (ipykernel's IPKernelApp, whose PUB socket
takes the options before it binds: ZeroMQ gives a bound socket's later
connections the options it had when it bound; and Kernel), so a kernel
forked from this one, which makes a new IPKernelApp, keeps them. The
running kernel's socket, bound already, gets them on its IOPub thread:
they apply to the connection it has. The kernel's main thread never
waits on the socket: it hands its messages to the IOPub thread, and a
``flush()`` that waits longer than ipykernel's flush timeout goes on.
"""

import os

import zmq

ENV = "KERNELBRIDGE_IOPUB_NODROP"  # set by the daemon for the kernels it starts
SNDHWM = 16  # messages queued on the kernel's side before its IOPub thread waits
MARKER = "kernelbridge"

_originals = None


def _set_options(socket):
    socket.setsockopt(zmq.SNDHWM, SNDHWM)
    socket.setsockopt(zmq.XPUB_NODROP, 1)


def install(ipython=None):
    """When the daemon asks (KERNELBRIDGE_IOPUB_NODROP=1), makes every
    iopub socket of this process wait instead of dropping, the running
    kernel's included (set on its IOPub thread, which owns the socket), and
    marks kernel_info. Idempotent; does nothing where this pyzmq has no
    XPUB_NODROP. Outside the daemon, PUB's usual dropping is kept."""
    global _originals
    if _originals is not None or os.environ.get(ENV) != "1" or not hasattr(zmq, "XPUB_NODROP"):
        return
    try:
        from ipykernel.kernelapp import IPKernelApp
        from ipykernel.kernelbase import Kernel
    except ImportError:  # IPython without a kernel: nothing publishes
        return
    bind, info = IPKernelApp._bind_socket, Kernel.kernel_info

    def nodrop_bind(self, socket, port):
        if socket.type == zmq.PUB:
            _set_options(socket)
        return bind(self, socket, port)

    def marked_info(self):
        return dict(info.fget(self), **{MARKER: {"iopub_nodrop": True}})

    IPKernelApp._bind_socket = nodrop_bind
    Kernel.kernel_info = property(marked_info)
    _originals = (bind, info)
    kernel = getattr(ipython, "kernel", None)
    thread = getattr(kernel, "iopub_thread", None)
    if thread is not None and hasattr(thread, "schedule"):
        thread.schedule(lambda: _set_options(thread.socket))


def uninstall():
    global _originals
    if _originals is not None:
        from ipykernel.kernelapp import IPKernelApp
        from ipykernel.kernelbase import Kernel

        IPKernelApp._bind_socket, Kernel.kernel_info = _originals
        _originals = None
