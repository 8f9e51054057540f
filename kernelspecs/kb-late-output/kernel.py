"""An ipykernel that publishes part of each run's output after the run's
execute_reply and idle status, as Deno's kernel at times does: 50 ms after
each non-silent execute_request was answered, one stdout line "late output"
and one display_data {"text/plain": "late display"} with that request as
parent. Its kernel.json tells kernelbridge to wait for such output
(metadata.kernelbridge.late_output). For kernelbridge's tests of kernel
quirks."""

import threading

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp


class LateOutputKernel(IPythonKernel):
    async def do_execute(self, code, silent, *args, **kwargs):
        reply = await super().do_execute(code, silent, *args, **kwargs)
        if not silent:
            parent = self.get_parent("shell")
            timer = threading.Timer(0.05, self._publish_late, args=(parent,))
            timer.daemon = True
            timer.start()
        return reply

    def _publish_late(self, parent):
        self.session.send(self.iopub_socket, "stream", {"name": "stdout", "text": "late output\n"},
                          parent=parent)
        self.session.send(self.iopub_socket, "display_data",
                          {"data": {"text/plain": "late display"}, "metadata": {}, "transient": {}},
                          parent=parent)


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=LateOutputKernel)
