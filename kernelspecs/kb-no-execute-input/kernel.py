"""An ipykernel that sends neither execute_input nor status "busy": of a
run's iopub messages only its outputs and the idle status come. For
kernelbridge's tests of kernel quirks."""

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp


class NoExecuteInputKernel(IPythonKernel):
    def _publish_execute_input(self, code, parent, execution_count):
        pass

    def _publish_status(self, status, channel, parent=None):
        if status != "busy":
            super()._publish_status(status, channel, parent)


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=NoExecuteInputKernel)
