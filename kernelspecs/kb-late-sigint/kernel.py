"""An ipykernel that puts its SIGINT handler in place only 0.3 s into each
request. ipykernel ignores SIGINT between requests and installs Python's
handler when it takes one up; on a loaded machine that can take a while,
and an interrupt that arrives meanwhile is lost. For kernelbridge's tests
of interrupts that come early."""

import time

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp


class LateSigintKernel(IPythonKernel):
    def pre_handler_hook(self):
        time.sleep(0.3)  # SIGINT is still ignored here (IPKernelApp ignores it)
        super().pre_handler_hook()


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=LateSigintKernel)
