"""A kernel that starts, says so on stderr, and never answers anything: no
kernel_info_reply, nothing on iopub. Its start has to time out. For
kernelbridge's reliability tests."""

import sys
import time

print("kb-never-ready: started; it will never answer kernel_info_request", file=sys.stderr, flush=True)
while True:
    time.sleep(3600)
