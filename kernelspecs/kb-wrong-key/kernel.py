"""An ipykernel that signs what it sends with a wrong key. By default only
the replies and outputs of execute requests are mis-signed (its status
messages and kernel_info_reply are right, so it becomes ready and each run's
idle status arrives); with WRONG_KEY=all in its environment every message is,
so it never becomes ready. Requests to it are verified with the right key as
usual. For kernelbridge's reliability tests."""

import hashlib
import hmac
import os

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
from jupyter_client.session import DELIM

WRONG_KEY = b"not-the-key-of-the-connection-file"


class WrongKeyKernel(IPythonKernel):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        session = self.session
        serialize = session.serialize
        everything = os.environ.get("WRONG_KEY") == "all"

        def mis_signed(msg, ident=None):
            frames = serialize(msg, ident)
            parent_type = (msg.get("parent_header") or {}).get("msg_type")
            if everything or (parent_type == "execute_request" and msg["msg_type"] != "status"):
                at = frames.index(DELIM) + 1
                mac = hmac.new(WRONG_KEY, digestmod=hashlib.sha256)
                for frame in frames[at + 1 : at + 5]:
                    mac.update(frame)
                frames[at] = mac.hexdigest().encode()
            return frames

        session.serialize = mis_signed


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=WrongKeyKernel)
