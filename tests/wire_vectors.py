#!/usr/bin/python3
"""wire_vectors.py - the reference side of tests/test_wire.c.

Uses jupyter_client.session.Session, the implementation every Jupyter
front end and ipykernel share, to produce and check wire messages for the
C codec. Frames travel hex-encoded inside one JSON document on stdout.

  wire_vectors.py sign SCHEME KEYHEX
      Print {"vectors": [...]}: messages signed by Session, each with its
      frames and the fields a decoder must find in them.
  wire_vectors.py verify SCHEME KEYHEX INFILE
      INFILE holds {"messages": [{"frames": [hex, ...]}, ...]}; feed each to
      Session.feed_identities + Session.deserialize and print
      {"results": [{"ok": true, header, parent_header, metadata, content,
      buffers, identities} | {"ok": false, "error": "..."}]}.

An empty KEYHEX means unsigned messages.
"""
import json
import sys

from jupyter_client.session import Session


def session_for(scheme, keyhex):
    return Session(
        key=bytes.fromhex(keyhex),
        signature_scheme=scheme,
        session="py-session",
        username="py-user",
    )


def unpack(frame):
    # Exactly what jupyter_client's json_unpacker does with a frame.
    return json.loads(frame.decode("utf8", "replace"))


def sign(scheme, keyhex):
    session = session_for(scheme, keyhex)
    specs = [
        ("execute_request", {"code": "1+1", "silent": False, "store_history": True},
         None, {}, [b"client-1"], []),
        ("stream", {"name": "stdout", "text": "h\u00e9llo \u4e16\u754c \U0001f40d\n"},
         "parent", {"tag": "\u00fcber"}, [], []),
        ("display_data", {"data": {"text/plain": "<Figure>", "image/png": "iVBORw0KGgo="},
                          "metadata": {}, "transient": {"display_id": "d-1"}},
         "parent", {}, [b"router-a", b"\x00\xffid"], [b"\x00\x01binary\xff", b""]),
        ("execute_result", {"data": {"application/json": {"a": [1, 2.5, None, True, "x"]},
                                     "text/plain": "a\u0000b"},
                            "execution_count": 9007199254740993, "metadata": {}},
         "parent", {"nested": {"deep": [[[]]]}}, [], [b"buf"]),
        # A str holding surrogateescape'd bytes goes out as invalid UTF-8.
        ("stream", {"name": "stderr", "text": "bad \udcff byte"}, "parent", {}, [], []),
    ]
    vectors = []
    first = None
    for msg_type, content, parent, metadata, idents, buffers in specs:
        msg = session.msg(msg_type, content=content,
                          parent=first if parent else None, metadata=metadata)
        if first is None:
            first = msg
        frames = session.serialize(msg, ident=idents)
        frames.extend(buffers)  # as Session.send does: buffers are not signed
        delim = frames.index(b"<IDS|MSG>")
        parts = frames[delim + 2:delim + 6]
        vectors.append({
            "name": msg_type,
            "frames": [f.hex() for f in frames],
            "msg_type": msg_type,
            "msg_id": msg["header"]["msg_id"],
            "parent_msg_id": first["header"]["msg_id"] if parent else "",
            "header": unpack(parts[0]),
            "parent_header": unpack(parts[1]),
            "metadata": unpack(parts[2]),
            "content": unpack(parts[3]),
            "identities": [i.hex() for i in idents],
            "buffers": [b.hex() for b in buffers],
        })
    print(json.dumps({"vectors": vectors}))


def verify(scheme, keyhex, path):
    session = session_for(scheme, keyhex)
    with open(path) as f:
        messages = json.load(f)["messages"]
    results = []
    for message in messages:
        frames = [bytes.fromhex(h) for h in message["frames"]]
        try:
            idents, rest = session.feed_identities(frames)
            msg = session.deserialize(rest)
            results.append({
                "ok": True,
                "header": msg["header"],
                "parent_header": msg["parent_header"],
                "metadata": msg["metadata"],
                "content": msg["content"],
                "msg_type": msg["msg_type"],
                "buffers": [bytes(b).hex() for b in msg["buffers"]],
                "identities": [i.hex() for i in idents],
            })
        except Exception as e:  # every rejection is a result, not a crash
            results.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    # default=str renders the datetimes Session makes of header dates.
    print(json.dumps({"results": results}, default=str))


def main(argv):
    if len(argv) == 4 and argv[1] == "sign":
        sign(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "verify":
        verify(argv[2], argv[3], argv[4])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
