"""An ipykernel that dies when the code it is asked to run contains a marker:
"__kb_exit__" ends the process with status 9, "__kb_segv__" kills it
with SIGSEGV, both before the code runs. Other code runs as in ipykernel. For
kernelbridge's reliability tests."""

import os
import signal

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp


class DieOnInputKernel(IPythonKernel):
    async def do_execute(self, code, silent, *args, **kwargs):
        if "__kb_exit__" in code:
            os._exit(9)
        if "__kb_segv__" in code:
            os.kill(os.getpid(), signal.SIGSEGV)
        return await super().do_execute(code, silent, *args, **kwargs)


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=DieOnInputKernel)
