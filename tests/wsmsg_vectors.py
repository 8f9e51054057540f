"""Print the test vectors of tests/test_wsmsg.c: websocket payloads made by
Jupyter Server's own serializers (jupyter_server 1.23, Debian's
python3-jupyter-server: jupyter_server.base.zmqhandlers), as C string
literals. JSON is dumped compactly, in the key order jansson keeps, so that
kb_wsmsg_encode must produce the very same bytes. Run once by hand:

    /usr/bin/python3 tests/wsmsg_vectors.py
"""

import json

import jupyter_server.base.zmqhandlers as zh


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf8")


HEADER = {"msg_id": "a1", "msg_type": "comm_msg", "username": "u", "session": "s1",
          "date": "2024-05-01T12:00:00.000000Z", "version": "5.3"}
PARENT = {"msg_id": "p0", "msg_type": "comm_open", "session": "s0"}
CONTENT = {"comm_id": "c", "data": {"x": "\u00e9"}}
BUFFERS = [b"\x00\x01\xff", b""]


def legacy(channel, parent, buffers):
    # The order of Session.deserialize, then the channel, as the handler adds it.
    msg = {"header": HEADER, "msg_id": HEADER["msg_id"], "msg_type": HEADER["msg_type"],
           "parent_header": parent, "metadata": {}, "content": CONTENT,
           "buffers": buffers, "channel": channel}
    return msg


def c_literal(name, data):
    lines = []
    for i in range(0, len(data), 24):
        lines.append('    "' + "".join("\\x%02x" % b for b in data[i:i + 24]) + '"')
    print("static const char %s[] = /* %d bytes */\n%s;" % (name, len(data), "\n".join(lines)))


real_dumps = json.dumps
zh.json.dumps = lambda obj, **kw: real_dumps(obj, separators=(",", ":"), ensure_ascii=False)

c_literal("v1_shell_buffers", zh.serialize_msg_to_ws_v1(
    [compact(HEADER), compact(PARENT), compact({}), compact(CONTENT)] + BUFFERS, "shell"))
c_literal("v1_iopub_plain", zh.serialize_msg_to_ws_v1(
    {"header": HEADER, "parent_header": {}, "metadata": {}, "content": CONTENT}, "iopub",
    pack=compact))
c_literal("legacy_binary_shell", zh.serialize_binary_message(legacy("shell", PARENT, BUFFERS)))
c_literal("legacy_text_iopub", real_dumps(legacy("iopub", {}, []), separators=(",", ":"),
                                          ensure_ascii=False).encode("utf8"))
