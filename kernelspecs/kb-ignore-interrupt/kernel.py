"""An ipykernel that ignores SIGINT, also while it runs code, so that an
interrupt never stops a run: the bridge has to kill it. For kernelbridge's
reliability tests."""

import signal

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp


class IgnoreInterruptKernel(IPythonKernel):
    # ipykernel installs Python's SIGINT handler around each request; this
    # kernel keeps SIGINT ignored instead (IPKernelApp ignores it at start).
    def pre_handler_hook(self):
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def post_handler_hook(self):
        pass


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=IgnoreInterruptKernel)
