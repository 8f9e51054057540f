"""The kernel websocket of Jupyter's API, /api/kernels/{id}/channels, with
real kernels and a real websocket client (websocket-client): both
framings, buffers, several clients, interrupt and restart, clients that
go away, stdin, auth and bad input; and its one queue with native runs."""
import json
import socket
import struct
import threading
import time
import uuid

import pytest
import websocket

from conftest import rss_kib, wait_until

V1 = "v1.kernel.websocket.jupyter.org"


# ---- the two framings, written here from Jupyter Server's documentation ----

def message(msg_type, content, session, channel="shell", buffers=()):
    return {
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": session,
                   "username": "test", "date": "2026-12-04T00:00:00.000000Z", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "content": content, "channel": channel,
        "buffers": list(buffers),
    }


def encode_v1(msg):
    parts = [msg["channel"].encode()] + [json.dumps(msg[k]).encode() for k in
                                          ("header", "parent_header", "metadata", "content")]
    parts += [bytes(b) for b in msg.get("buffers", ())]
    n = len(parts) + 1
    offsets, at = [], 8 * (n + 1)
    for part in parts:
        offsets.append(at)
        at += len(part)
    offsets.append(at)
    return struct.pack("<%dQ" % (n + 1), n, *offsets) + b"".join(parts)


def decode_v1(data):
    n = struct.unpack_from("<Q", data)[0]
    offsets = struct.unpack_from("<%dQ" % n, data, 8)
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(n - 1)]
    msg = {"channel": parts[0].decode()}
    for key, part in zip(("header", "parent_header", "metadata", "content"), parts[1:5]):
        msg[key] = json.loads(part) if part else {}
    msg["buffers"] = parts[5:]
    return msg


def encode_legacy_binary(msg):
    body = dict(msg)
    buffers = body.pop("buffers")
    parts = [json.dumps(body).encode()] + [bytes(b) for b in buffers]
    n = len(parts)
    offsets, at = [], 4 * (n + 1)
    for part in parts:
        offsets.append(at)
        at += len(part)
    return struct.pack(">%dI" % (n + 1), n, *offsets) + b"".join(parts)


def decode_legacy_binary(data):
    n = struct.unpack_from(">I", data)[0]
    offsets = list(struct.unpack_from(">%dI" % n, data, 4)) + [len(data)]
    msg = json.loads(data[offsets[0]:offsets[1]])
    msg["buffers"] = [data[offsets[i]:offsets[i + 1]] for i in range(1, n)]
    return msg


class Client:
    """One websocket on a kernel's channels."""

    def __init__(self, d, kernel_id, v1=False, token=None, session=None):
        self.v1 = v1
        self.session = session or uuid.uuid4().hex
        url = "ws://127.0.0.1:%d/api/kernels/%s/channels?session_id=%s" % (
            d.port, kernel_id, self.session)
        header = ["Authorization: token %s" % token] if token else []
        self.ws = websocket.create_connection(url, timeout=60, header=header,
                                              subprotocols=[V1] if v1 else None)
        assert self.ws.getsubprotocol() == (V1 if v1 else None)

    def send(self, msg):
        if self.v1:
            self.ws.send_binary(encode_v1(msg))
        elif msg.get("buffers"):
            self.ws.send_binary(encode_legacy_binary(msg))
        else:
            self.ws.send(json.dumps(msg))
        return msg["header"]["msg_id"]

    def request(self, msg_type, content, channel="shell", buffers=()):
        return self.send(message(msg_type, content, self.session, channel, buffers))

    def execute(self, code, **content):
        fields = dict(code=code, silent=False, store_history=True, user_expressions={},
                      allow_stdin=False)
        fields.update(content)
        return self.request("execute_request", fields)

    def recv(self):
        data = self.ws.recv()
        if isinstance(data, str):
            assert not self.v1, "v1 sends binary frames only"
            msg = json.loads(data)
            assert msg["msg_id"] == msg["header"]["msg_id"]
            assert msg["msg_type"] == msg["header"]["msg_type"]
            return msg
        return decode_v1(data) if self.v1 else decode_legacy_binary(data)

    def until_done(self, msg_id, timeout=60, reply=True):
        """Every message with parent msg_id until both its reply (none for
        comm messages) and its idle came."""
        got, replied, idle = [], not reply, False
        deadline = time.monotonic() + timeout
        while not (replied and idle):
            left = deadline - time.monotonic()
            assert left > 0, got
            # under the daemon's ping interval (30 s): its pings, answered
            # inside recv(), would keep a silent kernel's wait going forever
            self.ws.settimeout(min(left, 20))
            msg = self.recv()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            got.append(msg)
            replied |= msg["channel"] == "shell" and msg["header"]["msg_type"].endswith("_reply")
            idle |= (msg["header"]["msg_type"] == "status"
                     and msg["content"]["execution_state"] == "idle")
        return got

    def close(self):
        self.ws.close()


def of_type(msgs, msg_type):
    return [m for m in msgs if m["header"]["msg_type"] == msg_type]


@pytest.fixture(scope="module")
def d(shared_daemon):
    return shared_daemon


@pytest.fixture
def kernel(d):
    model = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    yield model["id"]
    d.delete("/api/kernels/" + model["id"])


@pytest.mark.parametrize("v1", [False, True], ids=["legacy", "v1"])
def test_execute_over_both_framings(d, kernel, v1):
    c = Client(d, kernel, v1=v1)
    try:
        got = c.until_done(c.execute("1 + 1"))
        assert of_type(got, "execute_result")[0]["content"]["data"]["text/plain"] == "2"
        reply = of_type(got, "execute_reply")[0]
        assert reply["channel"] == "shell" and reply["content"]["status"] == "ok"
        assert all(m["channel"] == "iopub" for m in got if m is not reply)
        assert of_type(got, "status")[0]["content"]["execution_state"] == "busy"
        # the reply's parent is the client's own header, session and all
        assert reply["parent_header"]["session"] == c.session
        info = c.until_done(c.request("kernel_info_request", {}))
        assert of_type(info, "kernel_info_reply")[0]["content"]["language_info"]["name"] == "python"
        assert d.ok("GET", "/api/kernels/" + kernel)["connections"] == 1
        err = c.until_done(c.execute("1/0"))
        assert of_type(err, "error")[0]["content"]["ename"] == "ZeroDivisionError"
        assert of_type(err, "execute_reply")[0]["content"]["status"] == "error"
    finally:
        c.close()
    assert wait_until(lambda: d.ok("GET", "/api/kernels/" + kernel)["connections"] == 0, 10)


@pytest.mark.parametrize("v1", [False, True], ids=["legacy", "v1"])
def test_binary_buffers_both_ways(d, kernel, v1):
    c = Client(d, kernel, v1=v1)
    try:
        setup = ("from ipykernel.comm import Comm\n"
                 "def target(comm, msg):\n"
                 "    @comm.on_msg\n"
                 "    def echo(m):\n"
                 "        comm.send({'sizes': [len(b) for b in m['buffers']]},\n"
                 "                  buffers=[bytes(b)[::-1] for b in m['buffers']])\n"
                 "get_ipython().kernel.comm_manager.register_target('kb-echo', target)\n"
                 "Comm(target_name='kb-out', data={'x': 1}, buffers=[b'\\x00\\x01abc', b''])\n")
        got = c.until_done(c.execute(setup))
        opened = of_type(got, "comm_open")[0]
        assert [bytes(b) for b in opened["buffers"]] == [b"\x00\x01abc", b""]
        comm_id = uuid.uuid4().hex
        c.until_done(c.request("comm_open", {"comm_id": comm_id, "target_name": "kb-echo",
                                             "data": {}}), reply=False)
        payload = [b"\xff\xfe\x00binary", b"x" * 70000]
        got = c.until_done(c.request("comm_msg", {"comm_id": comm_id, "data": {}},
                                     buffers=payload), reply=False)
        echo = of_type(got, "comm_msg")[0]
        assert echo["content"]["data"]["sizes"] == [len(b) for b in payload]
        assert [bytes(b) for b in echo["buffers"]] == [b[::-1] for b in payload]
    finally:
        c.close()


def test_clients_share_iopub_and_replies_reach_the_asker(d, kernel):
    a, b = Client(d, kernel), Client(d, kernel, v1=True)
    try:
        msg_id = a.execute("print('for both')")
        got_a = a.until_done(msg_id)
        assert of_type(got_a, "stream")[0]["content"]["text"] == "for both\n"
        # b sees the iopub of a's cell, and not a's reply
        seen = []
        while not any(m["header"]["msg_type"] == "status" and
                      m["content"]["execution_state"] == "idle" and
                      m["parent_header"].get("msg_id") == msg_id for m in seen):
            seen.append(b.recv())
        assert of_type(seen, "stream")[0]["content"]["text"] == "for both\n"
        assert not [m for m in seen if m["channel"] == "shell"]
        b_id = b.request("kernel_info_request", {})
        assert of_type(b.until_done(b_id), "kernel_info_reply")
        assert d.ok("GET", "/api/kernels/" + kernel)["connections"] == 2
    finally:
        a.close()
        b.close()


def test_interrupt_and_restart_during_a_run(d, kernel):
    c = Client(d, kernel)
    try:
        msg_id = c.execute("import time; print('in', flush=True); time.sleep(60)")
        # interrupt once the cell runs (a SIGINT before would find no cell to stop)
        c.ws.settimeout(30)
        early = []
        while not of_type(early, "stream"):
            early.append(c.recv())
        # the websocket's message and this request reach the daemon apart:
        # asked once the cell runs, the kernel is busy
        assert d.ok("GET", "/api/kernels/" + kernel)["execution_state"] == "busy"
        assert d.post("/api/kernels/%s/interrupt" % kernel).status == 204
        got = early + c.until_done(msg_id)
        assert of_type(got, "execute_reply")[0]["content"]["ename"] == "KeyboardInterrupt"
        c.execute("import time; time.sleep(60)")
        time.sleep(0.5)
        assert d.ok("POST", "/api/kernels/%s/restart" % kernel)["execution_state"] == "idle"
        # the same websocket drives the new kernel; a restart asked for is
        # not announced as `restarting` (Jupyter Server's clients take that
        # for a dead kernel that the server restarted by itself)
        fresh = c.execute("'fresh' if 'time' not in dir() else 'old'")
        seen = []
        c.ws.settimeout(30)
        while not (of_type(seen, "execute_result") and any(
                m["header"]["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                and m["parent_header"].get("msg_id") == fresh for m in seen)):
            seen.append(c.recv())
        states = [m["content"]["execution_state"] for m in of_type(seen, "status")]
        assert "restarting" not in states, states
        result = [m for m in of_type(seen, "execute_result")
                  if m["parent_header"].get("msg_id") == fresh]
        assert result[0]["content"]["data"]["text/plain"] == "'fresh'"
    finally:
        c.close()


def test_a_client_that_goes_mid_run_leaves_the_kernel_working(d, kernel):
    c = Client(d, kernel)
    c.execute("import time; time.sleep(1.5); left = 'done'")
    time.sleep(0.2)
    c.close()
    # the cell goes on; the native run after it waits its turn
    result = d.run("print(left)", context_id=kernel)
    assert result["logs"]["stdout"] == "done\n", result
    c2 = Client(d, kernel)
    try:
        got = c2.until_done(c2.execute("left"))
        assert of_type(got, "execute_result")[0]["content"]["data"]["text/plain"] == "'done'"
    finally:
        c2.close()


def test_native_runs_and_websocket_cells_take_turns(d, kernel):
    c = Client(d, kernel)
    try:
        native = {}

        def run_native():
            native["result"] = d.run("print('native'); order.append('native')",
                                     context_id=kernel)

        c.until_done(c.execute("order = []"))
        msg_id = c.execute("import time\nfor i in range(3):\n    print('ws', i)\n"
                           "    time.sleep(0.3)\norder.append('ws')")
        time.sleep(0.2)  # the cell is out; the run comes while it runs
        t = threading.Thread(target=run_native)
        t.start()
        got = c.until_done(msg_id)
        t.join(60)
        assert "".join(m["content"]["text"] for m in of_type(got, "stream")) == \
            "ws 0\nws 1\nws 2\n"
        assert native["result"]["logs"]["stdout"] == "native\n", native
        check = d.run("print(order)", context_id=kernel)
        assert check["logs"]["stdout"] == "['ws', 'native']\n"
    finally:
        c.close()


def test_stdin(d, kernel):
    c = Client(d, kernel)
    try:
        msg_id = c.execute("name = input('who? ')\nprint('hi', name)", allow_stdin=True)
        c.ws.settimeout(20)  # under the daemon's ping interval, which recv() answers
        while True:
            msg = c.recv()
            if msg["header"]["msg_type"] == "input_request":
                break
        assert msg["channel"] == "stdin" and msg["content"]["prompt"] == "who? "
        reply = message("input_reply", {"value": "kb"}, c.session, channel="stdin")
        reply["parent_header"] = msg["header"]
        c.send(reply)
        got = c.until_done(msg_id)
        assert "hi kb\n" in "".join(m["content"]["text"] for m in of_type(got, "stream"))
    finally:
        c.close()


def test_bad_input_is_dropped_and_the_socket_goes_on(d, kernel):
    before = d.ok("GET", "/health")["websockets"]
    c = Client(d, kernel)
    v1 = Client(d, kernel, v1=True)
    try:
        for junk in ("not json", "[]", json.dumps({"channel": "shell"}),
                     json.dumps(dict(message("execute_request", {"code": "1"}, "s"),
                                     channel="iopub")),
                     json.dumps({"header": {"msg_type": "x"}, "parent_header": {},
                                 "metadata": {}, "content": {}, "channel": "shell"})):
            c.ws.send(junk)
        c.ws.send_binary(b"\x00\x00\x00\x05\x00")
        c.ws.send_binary(b"")
        v1.ws.send("text is not v1")
        v1.ws.send_binary(struct.pack("<3Q", 2, 100, 5))
        good = encode_v1(message("kernel_info_request", {}, "s"))
        v1.ws.send_binary(good[:len(good) // 2])
        for client in (c, v1):
            got = client.until_done(client.execute("6 * 7"))
            assert of_type(got, "execute_result")[0]["content"]["data"]["text/plain"] == "42"
        # every one was counted (/health), none closed a socket
        after = d.ok("GET", "/health")["websockets"]
        assert after["malformed_dropped"] - before["malformed_dropped"] == 10, (before, after)
        assert after["open"] >= before["open"] + 2
    finally:
        c.close()
        v1.close()


def test_a_client_that_stops_reading_costs_bounded_memory(daemon_factory):
    """A client that never reads while its cell prints 256 MiB: the daemon
    holds at most its queue's cap (64 MiB) for it, closes it (1008), and
    the kernel goes on for everyone else."""
    d = daemon_factory("--pool", "python=0")
    kernel = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)["id"]
    stalled = Client(d, kernel)
    stalled.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    before = rss_kib(d.proc.pid)
    try:
        # flushed each MiB: 1 MiB messages, whatever the machine's speed (left
        # to ipykernel, a fast machine sends 256 MiB as one or two messages,
        # and the daemon must take a whole message in before anything caps it)
        stalled.execute("import sys\nline = 'x' * 1023 + '\\n'\n"
                        "for i in range(256 * 1024):\n    sys.stdout.write(line)\n"
                        "    if i % 1024 == 1023:\n        sys.stdout.flush()\n"
                        "sys.stdout.flush()")
        peak = before
        deadline = time.monotonic() + 120
        while d.ok("GET", "/health")["websockets"]["closed_backpressure"] == 0:
            assert time.monotonic() < deadline, d.ok("GET", "/health")["websockets"]
            peak = max(peak, rss_kib(d.proc.pid))
            time.sleep(0.05)
        peak = max(peak, rss_kib(d.proc.pid))
        # the cap, and room for the run's output kept by the daemon's budget
        assert peak - before < (64 + 96) * 1024, (before, peak)
        # the kernel finishes the cell and answers the next one
        assert wait_until(lambda: d.ok("GET", "/api/kernels/" + kernel)["execution_state"]
                          == "idle", 120)
        assert d.run("6 * 7", context_id=kernel)["results"][0]["text"] == "42"
    finally:
        stalled.ws.sock.close()
        d.delete("/api/kernels/" + kernel)


def test_unknown_kernel_and_auth(daemon_factory):
    d = daemon_factory(token="ws-secret")
    model = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    url = "ws://127.0.0.1:%d/api/kernels/%%s/channels" % d.port
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(url % model["id"], timeout=10)
    assert e.value.status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(url % str(uuid.uuid4()) + "?token=ws-secret", timeout=10)
    assert e.value.status_code == 404
    ws = websocket.create_connection(url % model["id"] + "?token=ws-secret", timeout=30)
    ws.close()
    c = Client(d, model["id"], token="ws-secret")
    try:
        got = c.until_done(c.execute("1"))
        assert of_type(got, "execute_reply")
    finally:
        c.close()
    # a deleted kernel closes its websockets
    c = Client(d, model["id"], token="ws-secret")
    d.ok("DELETE", "/api/kernels/" + model["id"], status=204, token="ws-secret")
    states = []
    c.ws.settimeout(30)
    while True:
        try:
            data = c.ws.recv()
        except websocket.WebSocketConnectionClosedException:
            break
        if data in ("", b""):  # the close frame
            break
        msg = json.loads(data)
        if msg["header"]["msg_type"] == "status":
            states.append(msg["content"]["execution_state"])
    assert "dead" in states
    c.close()
