"""Run Jupyter Server unchanged, except that a kernel websocket opened with
`?nodelay=1` gets TCP_NODELAY (tornado's WebSocketHandler.set_nodelay).

Jupyter Server 1.x leaves Nagle's algorithm on for kernel websockets, so a
small frame written right after another waits for the client's delayed ACK
(40 ms on Linux). The bench measures the server as shipped and, to show the
peer at its best, with that one setting changed per connection.
"""

import sys

from jupyter_server.serverapp import main
from jupyter_server.services.kernels.handlers import ZMQChannelsHandler

_open = ZMQChannelsHandler.open


def _open_nodelay(self, *args, **kwargs):
    if self.get_argument("nodelay", "0") == "1":
        self.set_nodelay(True)
    return _open(self, *args, **kwargs)


ZMQChannelsHandler.open = _open_nodelay

if __name__ == "__main__":
    sys.exit(main())
