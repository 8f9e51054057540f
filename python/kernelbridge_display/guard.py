"""The largest message the kernel publishes, kept on the kernel's side.

The daemon takes no kernel message larger than its --max-message-size: its
sockets refuse a larger frame (ZMQ_MAXMSGSIZE) by dropping the connection,
and what the kernel publishes until the connection is made again is lost,
often the run's last output and its ``status: idle``. So the daemon gives
its limit to the kernels it starts (KERNELBRIDGE_MAX_MESSAGE_SIZE), and
this module checks each published message before it is sent: one with a
part larger than the limit is sent instead as a small message of type
``kernelbridge_refused`` that says what was refused and how large it was
(content: ``msg_type``, ``bytes``, ``limit``). Nothing after it is lost;
the daemon ends the run's result with MessageTooLarge and a system line.

Replies (``*_reply``) and requests are left alone: the daemon's socket
limit stays the backstop for them, as for kernels without this module.
The check is at the class (jupyter_client's Session), so a kernel forked
from this one keeps it.
"""

import os

from jupyter_client.session import Session

REFUSED = "kernelbridge_refused"
ENV = "KERNELBRIDGE_MAX_MESSAGE_SIZE"

_original = None


def _limit():
    try:
        return int(os.environ.get(ENV, "0"))
    except ValueError:
        return 0


def _checked(limit):
    serialize = _original

    def checked_serialize(self, msg, ident=None):
        frames = serialize(self, msg, ident)
        parts = frames[-4:]  # header, parent header, metadata, content
        if max(len(part) for part in parts) <= limit:
            return frames
        header = msg.get("header") or {}
        msg_type = str(header.get("msg_type", ""))
        if msg_type.endswith("_reply") or msg_type.endswith("_request"):
            return frames
        marker = dict(msg)
        marker["header"] = dict(header, msg_type=REFUSED)
        marker["metadata"] = {}
        marker["content"] = {
            "msg_type": msg_type,
            "bytes": sum(len(part) for part in parts),
            "limit": limit,
        }
        return serialize(self, marker, ident)

    return checked_serialize


def install():
    """Checks every message the kernel's sessions send, when the daemon gave
    a limit. Idempotent."""
    global _original
    limit = _limit()
    if limit <= 0 or _original is not None:
        return
    _original = Session.serialize
    Session.serialize = _checked(limit)


def uninstall():
    global _original
    if _original is not None:
        Session.serialize = _original
        _original = None
