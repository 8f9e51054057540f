"""An ipykernel that floods iopub. From its start, a thread publishes stream
output that belongs to no request (empty parent header), about 1 MiB/s,
for as long as the kernel lives. Code containing "__kb_flood__ N" makes the
kernel publish N MiB of stdout for that request, in 64 KiB messages, before
running the code. Otherwise code runs as in ipykernel. For kernelbridge's
reliability tests."""

import re
import threading
import time

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp

CHUNK = ("flood " * 10923)[:65535] + "\n"  # 64 KiB, one line


class FloodKernel(IPythonKernel):
    def start(self):
        super().start()
        threading.Thread(target=self._flood_unparented, daemon=True).start()

    def _flood_unparented(self):
        text = "unparented flood\n" * 64
        while True:
            self.session.send(self.iopub_socket, "stream", {"name": "stdout", "text": text}, parent={})
            time.sleep(0.001)  # about 1 MiB/s: a flood, without an unbounded send queue

    async def do_execute(self, code, silent, *args, **kwargs):
        match = re.search(r"__kb_flood__ (\d+)", code)
        if match and not silent:
            parent = self.get_parent("shell")
            for _ in range(int(match.group(1)) * 16):
                self.session.send(self.iopub_socket, "stream", {"name": "stdout", "text": CHUNK},
                                  parent=parent)
            code = code.replace(match.group(0), "")
        return await super().do_execute(code, silent, *args, **kwargs)


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=FloodKernel)
