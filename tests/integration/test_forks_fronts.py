"""A fork is an ordinary context for every front end (SPEC section 13):
Jupyter's websocket (a cell, stdin) through /api/kernels, and E2B's
listener."""

from test_e2b import start as start_e2b
from test_jupyter_ws import Client, message, of_type


def test_a_fork_through_jupyters_websocket_with_stdin(daemon):
    daemon.ok("POST", "/contexts", {"language": "python", "context_id": "p"}, status=201)
    daemon.run("secret = 'from the parent'", context_id="p")
    fork = daemon.ok("POST", "/contexts/p/fork", {}, status=201)["contexts"][0]
    c = Client(daemon, fork["kernel_id"])
    try:
        msg_id = c.execute("name = input('who? ')\nprint(secret, name)", allow_stdin=True)
        c.ws.settimeout(20)
        while True:
            msg = c.recv()
            if msg["header"]["msg_type"] == "input_request":
                break
        reply = message("input_reply", {"value": "kb"}, c.session, channel="stdin")
        reply["parent_header"] = msg["header"]
        c.send(reply)
        got = c.until_done(msg_id)
        text = "".join(m["content"]["text"] for m in of_type(got, "stream"))
        assert text == "from the parent kb\n", got
    finally:
        c.close()
    # the parent kept its own state
    assert daemon.run("'name' in globals()", context_id="p")["results"][0]["text"] == "False"


def test_a_fork_through_e2bs_listener(daemon_factory):
    daemon, e2b = start_e2b(daemon_factory)
    daemon.ok("POST", "/contexts", {"language": "python", "context_id": "p"}, status=201)
    daemon.run("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})", context_id="p")
    fork = daemon.ok("POST", "/contexts/p/fork", {}, status=201)["contexts"][0]
    lines = e2b.execute("print(int(df.a.sum()))\ndf.a.max()", context_id=fork["context_id"])
    stdout = [line["text"] for line in lines if line["type"] == "stdout"]
    results = [line for line in lines if line["type"] == "result"]
    assert stdout == ["3\n"], lines
    assert results and results[0]["text"] == "2", lines
    assert lines[-1]["type"] == "end_of_execution", lines
