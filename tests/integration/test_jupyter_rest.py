"""Jupyter Server's REST API on the native listener (SPEC section 10):
/api, /api/kernelspecs, /api/kernels, /api/sessions and the kernelspecs'
files, over the daemon's contexts, with real kernels."""
import json
import re
import subprocess
import time
import uuid

import pytest
import websocket

from conftest import BINARY, error_of, pid_alive, wait_until

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
MODEL_KEYS = {"id", "name", "last_activity", "execution_state", "connections"}


def jupyter_error(response, status):
    """Jupyter Server's error body {message, reason}."""
    assert response.status == status, response
    body = response.json
    assert set(body) == {"message", "reason"} and body["message"], body
    return body


def assert_model(model, name="python3", state="idle"):
    assert set(model) == MODEL_KEYS, model
    assert str(uuid.UUID(model["id"])) == model["id"]
    assert model["name"] == name and model["execution_state"] == state, model
    assert TIME.match(model["last_activity"]), model["last_activity"]
    assert model["connections"] == 0


@pytest.fixture(scope="module")
def d(shared_daemon):
    return shared_daemon


def test_api_version_and_kernelspecs(d):
    assert isinstance(d.ok("GET", "/api")["version"], str)
    specs = d.ok("GET", "/api/kernelspecs")
    assert specs["default"] == "python3"
    python = specs["kernelspecs"]["python3"]
    assert python["name"] == "python3"
    spec = python["spec"]
    assert spec["language"] == "python" and spec["display_name"]
    assert "{connection_file}" in spec["argv"] and spec["interrupt_mode"] == "signal"
    assert isinstance(spec["env"], dict) and isinstance(spec["metadata"], dict)
    assert d.ok("GET", "/api/kernelspecs/python3") == python
    logo = python["resources"]["logo-64x64"]
    assert logo == "/kernelspecs/python3/logo-64x64.png"
    r = d.get(logo)
    assert r.status == 200 and r.header("Content-Type") == "image/png"
    assert r.body.startswith(b"\x89PNG")
    jupyter_error(d.get("/api/kernelspecs/nope"), 404)
    # nothing but the kernelspec dir's own regular files
    for path in ("/kernelspecs/python3/kernel.json/x", "/kernelspecs/python3/.hidden",
                 "/kernelspecs/python3/..%2Fkernel.json", "/kernelspecs/nope/logo-64x64.png",
                 "/kernelspecs/python3/absent.png"):
        jupyter_error(d.get(path), 404)


def test_kernel_lifecycle(d):
    r = d.post("/api/kernels", {"name": "python3"})
    assert r.status == 201, r
    model = r.json
    assert_model(model)
    kid = model["id"]
    assert d.ok("GET", "/api/kernels/" + kid) == d.ok("GET", "/api/kernels/%s/" % kid)
    assert any(k["id"] == kid for k in d.ok("GET", "/api/kernels"))
    # the same kernel is a context, reachable by its alias too
    contexts = d.ok("GET", "/contexts?all=true")["contexts"]
    ctx = next(c for c in contexts if c["kernel_id"] == kid)
    assert d.ok("GET", "/contexts/" + kid)["context_id"] == ctx["context_id"]
    assert d.run("x = 6 * 7", context_id=kid)["error"] is None
    assert d.run("print(x)", context_id=ctx["context_id"])["logs"]["stdout"] == "42\n"
    # interrupt a run; the kernel lives on
    stream = d.run_stream("import time; time.sleep(30)", context_id=kid)
    try:
        events = stream.events()
        next(e for e in events if e.event == "start")
        assert wait_until(lambda: d.ok("GET", "/api/kernels/" + kid)["execution_state"] == "busy", 10)
        r = d.post("/api/kernels/%s/interrupt" % kid)
        assert r.status == 204, r
        result = next(e for e in events if e.event == "result").data
        assert result["error"]["name"] == "KeyboardInterrupt", result
    finally:
        stream.close()
    pid = d.ok("GET", "/contexts/" + kid)["pid"]
    restarted = d.ok("POST", "/api/kernels/%s/restart" % kid)
    assert_model(restarted)
    assert restarted["id"] == kid, "a restart keeps the kernel's id"
    assert wait_until(lambda: not pid_alive(pid), 10)
    assert "NameError" in d.run("x", context_id=kid)["error"]["name"]
    r = d.delete("/api/kernels/" + kid)
    assert r.status == 204, r
    jupyter_error(d.get("/api/kernels/" + kid), 404)
    assert not any(k["id"] == kid for k in d.ok("GET", "/api/kernels"))


def test_native_contexts_are_kernels_with_a_stable_alias(d):
    ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    try:
        kid = ctx["kernel_id"]
        assert str(uuid.UUID(kid)) == kid
        model = d.ok("GET", "/api/kernels/" + kid)
        assert_model(model)
        assert d.ok("GET", "/contexts/" + ctx["context_id"])["kernel_id"] == kid
        # the default context is a kernel as well
        d.run("1")
        default = next(c for c in d.ok("GET", "/contexts?all=true")["contexts"] if c["default"])
        assert default["kernel_id"] in {k["id"] for k in d.ok("GET", "/api/kernels")}
    finally:
        d.ok("DELETE", "/contexts/" + ctx["context_id"], status=204)


def test_kernel_start_defaults_env_and_errors(d, tmp_path):
    model = d.ok("POST", "/api/kernels", {}, status=201)
    assert model["name"] == "python3"
    d.ok("DELETE", "/api/kernels/" + model["id"], status=204)
    # KERNEL_* and JPY_* reach the kernel; the rest of a client's
    # environment (Jupyter Server 1.x sends its whole own) does not
    env = {"KERNEL_T_VAR": "on", "JPY_SESSION_NAME": "a.ipynb", "KB_T_OTHER": "no",
           "PATH": "/nowhere"}
    model = d.ok("POST", "/api/kernels", {"name": "python3", "env": env,
                                          "path": str(tmp_path)}, status=201)
    try:
        out = d.run("import os; print(os.environ['KERNEL_T_VAR'], os.environ['JPY_SESSION_NAME'],"
                    " 'KB_T_OTHER' in os.environ, os.environ['PATH'] != '/nowhere', os.getcwd())",
                    context_id=model["id"])["logs"]["stdout"]
        assert "".join(out) == "on a.ipynb False True %s\n" % tmp_path
    finally:
        d.ok("DELETE", "/api/kernels/" + model["id"], status=204)
    # the gateway client's KERNEL_WORKING_DIR is the cwd when no path is given
    model = d.ok("POST", "/api/kernels", {"name": "python3",
                                          "env": {"KERNEL_WORKING_DIR": str(tmp_path)}},
                 status=201)
    try:
        out = d.run("import os; print(os.getcwd())", context_id=model["id"])["logs"]["stdout"]
        assert "".join(out) == "%s\n" % tmp_path
    finally:
        d.ok("DELETE", "/api/kernels/" + model["id"], status=204)
    assert "nope" in jupyter_error(d.post("/api/kernels", {"name": "nope"}), 404)["message"]
    jupyter_error(d.post("/api/kernels", {"name": 3}), 400)
    jupyter_error(d.post("/api/kernels", {"env": ["A=1"]}), 400)
    jupyter_error(d.request("POST", "/api/kernels", b"{not json"), 400)
    missing = str(uuid.uuid4())
    assert missing in jupyter_error(d.get("/api/kernels/" + missing), 404)["message"]
    jupyter_error(d.delete("/api/kernels/" + missing), 404)
    jupyter_error(d.post("/api/kernels/%s/interrupt" % missing), 404)
    jupyter_error(d.post("/api/kernels/%s/restart" % missing), 404)
    jupyter_error(d.get("/api/kernels/" + "x" * 300), 404)
    jupyter_error(d.get("/api/nothing"), 404)
    assert jupyter_error(d.request("PUT", "/api/kernels"), 405)["reason"] == "Method Not Allowed"


def test_sessions(d):
    body = {"path": "work/a.ipynb", "name": "a.ipynb", "type": "notebook",
            "kernel": {"name": "python3"}}
    r = d.post("/api/sessions", body)
    assert r.status == 201, r
    session = r.json
    assert str(uuid.UUID(session["id"])) == session["id"]
    assert (session["path"], session["name"], session["type"]) == ("work/a.ipynb", "a.ipynb",
                                                                    "notebook")
    assert_model(session["kernel"])
    kid = session["kernel"]["id"]
    # one session per document
    assert d.ok("POST", "/api/sessions", body, status=201)["id"] == session["id"]
    assert d.ok("GET", "/api/sessions/" + session["id"]) == session
    assert [s["id"] for s in d.ok("GET", "/api/sessions")] == [session["id"]]
    # rename; then a new kernel of a kernelspec, the old one shut down
    renamed = d.ok("PATCH", "/api/sessions/" + session["id"], {"path": "work/b.ipynb"})
    assert renamed["path"] == "work/b.ipynb" and renamed["kernel"]["id"] == kid
    moved = d.ok("PATCH", "/api/sessions/" + session["id"], {"kernel": {"name": "python3"}})
    assert moved["kernel"]["id"] != kid
    assert wait_until(lambda: d.get("/api/kernels/" + kid).status == 404, 10)
    # a session on a kernel that exists
    other = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    second = d.ok("POST", "/api/sessions", {"path": "c.py", "type": "console",
                                            "kernel": {"id": other["id"]}}, status=201)
    assert second["kernel"]["id"] == other["id"]
    # its kernel deleted under it: the session goes too
    d.ok("DELETE", "/api/kernels/" + other["id"], status=204)
    jupyter_error(d.get("/api/sessions/" + second["id"]), 404)
    assert [s["id"] for s in d.ok("GET", "/api/sessions")] == [session["id"]]
    r = d.delete("/api/sessions/" + session["id"])
    assert r.status == 204, r
    assert d.ok("GET", "/api/sessions") == []
    jupyter_error(d.get("/api/kernels/" + moved["kernel"]["id"]), 404)
    # bad input
    jupyter_error(d.post("/api/sessions", {"type": "notebook"}), 400)
    jupyter_error(d.post("/api/sessions", {"path": "x", "kernel": "python3"}), 400)
    jupyter_error(d.post("/api/sessions", {"path": "x", "kernel": {"id": str(uuid.uuid4())}}), 400)
    jupyter_error(d.post("/api/sessions", {"path": "x", "kernel": {"name": "nope"}}), 404)
    assert d.ok("GET", "/api/sessions") == []
    jupyter_error(d.get("/api/sessions/" + str(uuid.uuid4())), 404)
    jupyter_error(d.request("PATCH", "/api/sessions/" + str(uuid.uuid4()), {"path": "y"}), 404)
    jupyter_error(d.delete("/api/sessions/" + str(uuid.uuid4())), 404)


def test_auth_forms(daemon_factory):
    d = daemon_factory(token="s3cret-jupyter")
    assert d.get("/api/kernels", token="").status == 401
    jupyter_error(d.get("/api/kernels", token="wrong"), 401)
    assert d.ok("GET", "/api/kernels", token="s3cret-jupyter") == []
    assert d.get("/api/kernels", token="",
                 headers={"Authorization": "token s3cret-jupyter"}).status == 200
    assert d.get("/api/kernels?token=s3cret-jupyter", token="").status == 200
    assert d.get("/api/kernels?token=wrong", token="").status == 401
    # the query form is for Jupyter's paths only
    assert d.get("/contexts?token=s3cret-jupyter", token="").status == 401
    assert d.get("/contexts", token="", headers={"Authorization": "token s3cret-jupyter"}).status == 200
    assert json.loads(d.get("/health", token="").body)["status"]


# ---- culling idle kernels (--cull-idle-timeout, KB_CULL_IDLE_TIMEOUT) ----

CULL = 2  # seconds


def gone_within(d, path, timeout):
    """Seconds until GET path answered 404 (polled), or None."""
    started = time.monotonic()
    if wait_until(lambda: d.get(path).status == 404, timeout):
        return time.monotonic() - started
    return None


def test_idle_kernels_are_culled(daemon_factory):
    d = daemon_factory("--cull-idle-timeout", str(CULL))
    idle = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    native = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    busy = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    # a run longer than the timeout keeps its kernel: not idle while it runs
    out = d.run("import time; time.sleep(%g); print('slept')" % (CULL + 1.5), context_id=busy["id"])
    assert out["error"] is None and out["logs"]["stdout"] == "slept\n", out
    assert d.get("/api/kernels/" + busy["id"]).status == 200, "culled during its run"
    # the others were idle that long: culled, and later calls say why
    message = jupyter_error(d.get("/api/kernels/" + idle["id"]), 404)["message"]
    assert "culled after %d s idle" % CULL in message, message
    body = error_of(d.get("/contexts/" + native["context_id"]), 404, "SESSION_NOT_FOUND")
    assert "culled after %d s idle" % CULL in body["message"], body
    assert "culled" in jupyter_error(d.get("/api/kernels/" + native["kernel_id"]), 404)["message"]
    body = error_of(d.post("/run", {"code": "1", "context_id": idle["id"]}), 404,
                    "SESSION_NOT_FOUND")
    assert "culled" in body["message"], body
    assert not any(k["id"] in (idle["id"], native["kernel_id"]) for k in d.ok("GET", "/api/kernels"))
    # the busy one: once its run is over, after the timeout, not sooner
    took = gone_within(d, "/api/kernels/" + busy["id"], CULL + 10)
    assert took is not None and took >= CULL - 0.2, took


def test_a_connected_websocket_keeps_its_kernel(daemon_factory):
    """Jupyter Server's cull_connected is false: a kernel with a client on
    its websocket is not culled; once the client has gone, it is."""
    d = daemon_factory(env={"KB_CULL_IDLE_TIMEOUT": str(CULL)})
    watched = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    other = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    ws = websocket.create_connection(
        "ws://127.0.0.1:%d/api/kernels/%s/channels" % (d.port, watched["id"]), timeout=30)
    try:
        assert gone_within(d, "/api/kernels/" + other["id"], CULL + 10) is not None
        time.sleep(1)
        model = d.ok("GET", "/api/kernels/" + watched["id"])
        assert model["connections"] == 1, model
        # and it still answers over that websocket
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": "s",
                       "username": "t", "date": "2026-12-04T00:00:00.000000Z", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": "6 * 7", "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False}}))
        while True:
            msg = json.loads(ws.recv())
            if msg["msg_type"] == "execute_reply" and msg["parent_header"]["msg_id"] == msg_id:
                assert msg["content"]["status"] == "ok", msg
                break
    finally:
        ws.close()
    took = gone_within(d, "/api/kernels/" + watched["id"], CULL + 10)
    assert took is not None and took >= CULL - 0.5, took


def test_no_culling_unless_asked(d):
    model = d.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
    try:
        time.sleep(CULL + 1)
        assert_model(d.ok("GET", "/api/kernels/" + model["id"]))
    finally:
        d.ok("DELETE", "/api/kernels/" + model["id"], status=204)


def test_cull_idle_timeout_must_be_seconds():
    for value in ("soon", "-1", ""):
        done = subprocess.run([BINARY, "serve", "--listen", "127.0.0.1:0", "--ephemeral",
                               "--cull-idle-timeout", value], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 2, (value, done)
        assert "--cull-idle-timeout" in done.stderr, done.stderr
