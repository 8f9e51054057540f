"""Jupyter's own clients with the daemon as their kernel gateway (SPEC
section 10): Debian's Jupyter Server (`--GatewayClient.url` at the daemon)
driven through its own REST API and kernel websocket, and a notebook page
of nbclassic in a real browser (headless Chromium through selenium).

Every process here is real and started by the test: the daemon (with a
token), Jupyter Server / nbclassic (each with a token of its own, its
config, data and runtime dirs and HOME in a private temp dir, on a free
loopback port), chromedriver and Chromium (a private profile dir). All are
stopped in `finally`, and the test checks that none is left.

KB_SCREENSHOT_DIR=<dir> also copies the notebook's screenshot there
(docs/images/notebook-gateway.png was made so).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import websocket

from conftest import Daemon, pid_alive, pids_with_marker, wait_until

PYTHON = "/usr/bin/python3"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

APP_START_TIMEOUT = 60.0  # Jupyter Server / nbclassic answering
APP_STOP_TIMEOUT = 15.0  # SIGTERM to exit, then SIGKILL
KERNEL_TIMEOUT = 60.0  # one kernel message exchange (a kernel start included)
PAGE_TIMEOUT = 90.0  # the notebook page: loaded, kernel idle, cell run


def free_port():
    """An ephemeral loopback port nobody holds now (Jupyter Server cannot
    report a port 0 back, so it is given one; a lost race is retried)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc, timeout=APP_STOP_TIMEOUT):
    """SIGTERM the process group of proc (started with its own session),
    SIGKILL it if it has not gone within timeout."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of its group is left
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.wait(timeout=timeout)


class JupyterApp:
    """Jupyter Server (or nbclassic, a Jupyter Server application) as a
    subprocess, its kernels at the daemon's gateway."""

    def __init__(self, module_argv, daemon, root_dir, attempts=3):
        self.dir = Path(tempfile.mkdtemp(prefix="kbjs-", dir="/tmp"))
        self.token = uuid.uuid4().hex
        home = self.dir / "home"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER", "KB_", "KERNEL_", "IPYTHON", "PYTHON"))}
        env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "config"),
                   JUPYTER_DATA_DIR=str(home / "data"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   IPYTHONDIR=str(home / "ipython"), TMPDIR=str(self.dir / "tmp"),
                   JUPYTER_PLATFORM_DIRS="0")
        for sub in ("config", "data", "runtime", "ipython"):
            (home / sub).mkdir(parents=True)
        (self.dir / "tmp").mkdir()
        self.log_path = self.dir / "log"
        for attempt in range(attempts):
            self.port = free_port()
            argv = [PYTHON, *module_argv,
                    "--GatewayClient.url=" + daemon.url,
                    "--GatewayClient.auth_token=" + daemon.token,
                    "--GatewayClient.request_timeout=60",
                    "--ServerApp.ip=127.0.0.1", "--ServerApp.port=%d" % self.port,
                    "--ServerApp.port_retries=0", "--ServerApp.token=" + self.token,
                    "--ServerApp.password=", "--ServerApp.open_browser=False",
                    "--ServerApp.root_dir=" + str(root_dir),
                    "--ServerApp.allow_remote_access=False",
                    "--ServerApp.allow_root=True"]  # CI runs as root
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, env=env,
                                             cwd=str(root_dir), start_new_session=True)
            if self._wait_ready():
                self.url = "http://127.0.0.1:%d" % self.port
                return
            lost_race = "is not available" in self.log
            self.close()
            if not lost_race:
                break
        log = self.log
        self.cleanup()
        raise AssertionError("%s did not start:\n%s" % (module_argv, log[-5000:]))

    def _wait_ready(self):
        deadline = time.monotonic() + APP_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.request("GET", "/api/status", timeout=5)[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    @property
    def log(self):
        return self.log_path.read_text(errors="replace")

    def request(self, method, path, body=None, timeout=KERNEL_TIMEOUT):
        """(status, parsed JSON body or raw bytes, content type) of one request,
        authenticated by Jupyter Server's own token."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Authorization": "token " + self.token}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, data, headers)
            r = conn.getresponse()
            raw = r.read()
            ctype = r.getheader("Content-Type") or ""
            if raw and ctype.startswith("application/json") and not raw.startswith(b"\x89PNG"):
                return r.status, json.loads(raw), ctype
            # (Jupyter Server 1.23 proxies a kernelspec's logo as application/json)
            return r.status, raw, ctype
        finally:
            conn.close()

    def ok(self, method, path, body=None, status=200):
        got, payload, _ = self.request(method, path, body)
        assert got == status, "%s %s: %s %r\n%s" % (method, path, got, payload, self.log[-3000:])
        return payload

    def close(self):
        kill_group(self.proc)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class KernelSocket:
    """A client of Jupyter Server's kernel websocket, legacy JSON framing."""

    def __init__(self, app, kernel_id):
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(
            "ws://127.0.0.1:%d/api/kernels/%s/channels?session_id=%s"
            % (app.port, kernel_id, self.session),
            timeout=KERNEL_TIMEOUT, header=["Authorization: token " + app.token])

    def send(self, msg_type, content, channel="shell"):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "session": self.session,
                       "username": "test", "date": "2026-12-04T00:00:00.000000Z",
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": channel,
            "buffers": []}))
        return msg_id

    def execute(self, code):
        return self.send("execute_request", dict(code=code, silent=False, store_history=True,
                                                 user_expressions={}, allow_stdin=False))

    def recv(self, timeout):
        self.ws.settimeout(max(timeout, 0.01))
        return json.loads(self.ws.recv())

    def until_done(self, msg_id, timeout=KERNEL_TIMEOUT, seen=()):
        """The messages with parent msg_id until its reply and its idle."""
        got = [m for m in seen if m["parent_header"].get("msg_id") == msg_id]
        deadline = time.monotonic() + timeout
        while not (of_type(got, "execute_reply") or of_type(got, "kernel_info_reply")) \
                or not [m for m in of_type(got, "status")
                        if m["content"]["execution_state"] == "idle"]:
            left = deadline - time.monotonic()
            assert left > 0, "no reply and idle for %s in %ss: %r" % (msg_id, timeout, got)
            msg = self.recv(left)
            if msg["parent_header"].get("msg_id") == msg_id:
                got.append(msg)
        return got

    def run(self, code, timeout=KERNEL_TIMEOUT):
        """Execute code; its messages. ipykernel aborts (status "aborted",
        nothing run) a request that reaches it just after an error reply,
        as any Jupyter client may see: such a cell is sent again."""
        for _ in range(3):
            got = self.until_done(self.execute(code), timeout)
            if of_type(got, "execute_reply")[0]["content"]["status"] != "aborted":
                return got
        raise AssertionError("%r was aborted 3 times" % code)

    def wait_connected(self, timeout=KERNEL_TIMEOUT):
        """Jupyter Server 1.23 connects to the gateway after accepting us,
        and loses a message that comes before that connection is under way
        (see the notebook test): ask for kernel_info until one comes back."""
        deadline = time.monotonic() + timeout
        while True:
            msg_id = self.send("kernel_info_request", {})
            try:
                return self.until_done(msg_id, timeout=min(3.0, deadline - time.monotonic()))
            except (AssertionError, websocket.WebSocketTimeoutException):
                assert time.monotonic() < deadline, "no kernel_info_reply in %ss" % timeout

    def close(self):
        self.ws.close()


def summary(msgs):
    """(channel, msg_type, the gist of content) of each message, for failures."""
    return [(m["channel"], m["header"]["msg_type"],
             {k: v for k, v in m["content"].items() if k in (
                 "execution_state", "status", "ename", "name", "text", "execution_count")})
            for m in msgs]


def of_type(msgs, msg_type):
    return [m for m in msgs if m["header"]["msg_type"] == msg_type]


def daemon_kernel_ids(d):
    return {k["id"] for k in d.ok("GET", "/api/kernels")}


def daemon_context_kernel_ids(d):
    return {c["kernel_id"] for c in d.ok("GET", "/contexts?all=true")["contexts"]}


def group_pids(pgid):
    """Live processes of process group pgid."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                pids.append(int(entry))
    return pids


def assert_no_leftovers(marker=None, pgid=None):
    def left():
        return (pids_with_marker(marker) if marker else []) + (group_pids(pgid) if pgid else [])
    assert wait_until(lambda: not left(), APP_STOP_TIMEOUT), "processes left: %s" % left()


def stop_daemon(d):
    """Stop the daemon (exit 0, no sanitizer report) and check that none of
    its kernels is left."""
    marker = str(d.dir)
    d.close()
    assert_no_leftovers(marker)


def stop_jupyter_and_daemon(app, d):
    """Stop Jupyter Server (or nbclassic) if it started, check it left no
    process and logged no traceback, then stop the daemon in any case."""
    try:
        if app is not None:
            app.close()
            log = app.log
            app.cleanup()
            assert_no_leftovers(pgid=app.proc.pid)
            assert "Traceback" not in log, log[-5000:]
    finally:
        stop_daemon(d)


def test_jupyter_server_with_the_daemon_as_its_gateway(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    d = Daemon(token=uuid.uuid4().hex)
    app = None
    sockets = []
    try:
        app = JupyterApp(["-m", "jupyter_server"], d, root)

        # kernelspecs: the daemon's, as Jupyter Server serves them
        specs = app.ok("GET", "/api/kernelspecs")
        ours = d.ok("GET", "/api/kernelspecs")
        assert specs["default"] == ours["default"] == "python3"
        assert set(specs["kernelspecs"]) == set(ours["kernelspecs"])
        spec = specs["kernelspecs"]["python3"]["spec"]
        assert spec["language"] == "python"
        assert spec["display_name"] == ours["kernelspecs"]["python3"]["spec"]["display_name"]
        logo = specs["kernelspecs"]["python3"]["resources"]["logo-64x64"]
        status, png, ctype = app.request("GET", logo)
        assert status == 200 and png.startswith(b"\x89PNG"), (logo, status, ctype)

        # a kernel made through Jupyter Server is one of the daemon's
        model = app.ok("POST", "/api/kernels", {"name": "python3"}, status=201)
        kid = model["id"]
        assert model["name"] == "python3"
        assert kid in daemon_kernel_ids(d)
        assert kid in daemon_context_kernel_ids(d)
        assert kid in {k["id"] for k in app.ok("GET", "/api/kernels")}
        assert app.ok("GET", "/api/kernels/" + kid)["id"] == kid

        ks = KernelSocket(app, kid)
        sockets.append(ks)
        info = of_type(ks.wait_connected(), "kernel_info_reply")[0]
        assert info["content"]["language_info"]["name"] == "python"

        got = ks.run("1+1")
        assert of_type(got, "execute_result")[0]["content"]["data"]["text/plain"] == "2"
        assert of_type(got, "execute_reply")[0]["content"]["status"] == "ok"
        got = ks.run("print('hello', 6*7)")
        streams = of_type(got, "stream")
        assert [s["content"]["name"] for s in streams] == ["stdout"]
        assert "".join(s["content"]["text"] for s in streams) == "hello 42\n"
        assert of_type(got, "execute_reply")[0]["content"]["status"] == "ok"
        # the daemon sees Jupyter Server's connection, and Jupyter Server's
        # list of kernels is the daemon's models
        assert d.ok("GET", "/api/kernels/" + kid)["connections"] == 1
        listed = {k["id"]: k for k in app.ok("GET", "/api/kernels")}
        assert listed[kid]["connections"] == 1 and listed[kid]["execution_state"] == "idle"
        assert listed[kid]["last_activity"] > model["last_activity"]

        # interrupt through Jupyter Server, once the cell runs
        msg_id = ks.execute("import time; print('sleeping', flush=True); time.sleep(30)")
        early, deadline = [], time.monotonic() + KERNEL_TIMEOUT
        while not [m for m in of_type(early, "stream") if "sleeping" in m["content"]["text"]]:
            early.append(ks.recv(deadline - time.monotonic()))
        t0 = time.monotonic()
        status, body, _ = app.request("POST", "/api/kernels/%s/interrupt" % kid)
        assert status == 204, (status, body)
        got = ks.until_done(msg_id, timeout=15, seen=early)
        assert time.monotonic() - t0 < 15
        assert [m["content"]["ename"] for m in of_type(got, "error")] == ["KeyboardInterrupt"], \
            summary(got)
        reply = of_type(got, "execute_reply")[0]["content"]
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"

        # restart through Jupyter Server: a new process, the variable gone
        assert of_type(ks.run("x = 41"), "execute_reply")[0]["content"]["status"] == "ok"
        pid = d.ok("GET", "/contexts/" + kid)["pid"]
        restarted = app.ok("POST", "/api/kernels/%s/restart" % kid)
        assert restarted["id"] == kid
        assert wait_until(lambda: not pid_alive(pid), 15)
        assert d.ok("GET", "/contexts/" + kid)["pid"] != pid
        # a frontend reconnects after a restart; the old socket may linger
        ks2 = KernelSocket(app, kid)
        sockets.append(ks2)
        ks2.wait_connected()
        got = ks2.run("x")
        assert of_type(got, "error")[0]["content"]["ename"] == "NameError"
        got = ks2.run("x = 1; x + 1")
        assert of_type(got, "execute_result")[0]["content"]["data"]["text/plain"] == "2"
        for s in sockets:
            s.close()
        sockets.clear()

        # a session through Jupyter Server: its kernel is the daemon's too
        session = app.ok("POST", "/api/sessions", {
            "path": "s.ipynb", "name": "s.ipynb", "type": "notebook",
            "kernel": {"name": "python3"}}, status=201)
        skid = session["kernel"]["id"]
        assert skid != kid and skid in daemon_kernel_ids(d)
        assert skid in daemon_context_kernel_ids(d)
        assert [s["id"] for s in app.ok("GET", "/api/sessions")] == [session["id"]]
        ks3 = KernelSocket(app, skid)
        sockets.append(ks3)
        ks3.wait_connected()
        got = ks3.run("print('from a session')")
        assert of_type(got, "stream")[0]["content"]["text"] == "from a session\n"
        ks3.close()
        sockets.clear()
        status, body, _ = app.request("DELETE", "/api/sessions/" + session["id"])
        assert status == 204, (status, body)
        assert wait_until(lambda: skid not in daemon_kernel_ids(d), 15)
        assert skid not in daemon_context_kernel_ids(d)
        assert app.ok("GET", "/api/sessions") == []

        # delete through Jupyter Server: gone at the daemon
        assert kid in daemon_kernel_ids(d)
        status, body, _ = app.request("DELETE", "/api/kernels/" + kid)
        assert status == 204, (status, body)
        assert kid not in daemon_kernel_ids(d)
        assert kid not in daemon_context_kernel_ids(d)
        assert d.get("/api/kernels/" + kid).status == 404
        assert app.request("GET", "/api/kernels/" + kid)[0] == 404
    finally:
        try:
            for s in sockets:
                s.close()
        finally:
            stop_jupyter_and_daemon(app, d)


NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {},
               "outputs": [], "source": ""}],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}

JS_KERNEL_IDLE = """
var nb = window.Jupyter && Jupyter.notebook;
if (!nb || !nb.kernel || !nb.kernel.is_connected()) return null;
var icon = document.getElementById('kernel_indicator_icon');
return icon && icon.classList.contains('kernel_idle_icon') ? nb.kernel.id : null;
"""


JS_PAGE_STATE = """
var nb = window.Jupyter && Jupyter.notebook, k = nb && nb.kernel, c = nb && nb.get_cell(0);
var icon = document.getElementById('kernel_indicator_icon');
var note = document.getElementById('notification_kernel');
return JSON.stringify({
  kernel: k ? {id: k.id, connected: k.is_connected(), ws: k.ws ? k.ws.readyState : null} : null,
  indicator: icon ? icon.className : null, notification: note ? note.textContent : null,
  cell: c ? {text: c.get_text(), outputs: c.output_area.outputs,
             prompt: c.element.find('.input_prompt').text()} : null});
"""


def page_state(driver):
    """What the page shows, for a failure's message."""
    try:
        state = driver.execute_script(JS_PAGE_STATE)
    except Exception as e:  # the page itself may be what failed
        state = repr(e)
    try:
        console = [e["message"] for e in driver.get_log("browser")]
    except Exception as e:
        console = repr(e)
    return "page: %s\nconsole: %s" % (state, console)


def test_notebook_page_in_a_browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    root = tmp_path / "root"
    root.mkdir()
    d = Daemon(token=uuid.uuid4().hex)
    (root / "t.ipynb").write_text(json.dumps(NOTEBOOK))
    browser = tmp_path / "browser"  # the profile and chromedriver's log
    browser.mkdir()
    shot = tmp_path / "notebook-gateway.png"
    app = driver = None
    try:
        app = JupyterApp(["/usr/bin/jupyter-nbclassic"], d, root)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                    "--disable-extensions", "--user-data-dir=" + str(browser / "profile"),
                    "--window-size=1200,720"):
            options.add_argument(arg)
        service = Service(CHROMEDRIVER, log_path=str(browser / "chromedriver.log"))
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(PAGE_TIMEOUT)
        driver.set_script_timeout(30)
        driver.get("%s/notebooks/t.ipynb?token=%s" % (app.url, app.token))
        def wait(condition, what):
            try:
                return WebDriverWait(driver, PAGE_TIMEOUT, poll_frequency=0.2).until(condition)
            except TimeoutException:
                raise AssertionError("no %s in %ss; %s\n%s" % (
                    what, PAGE_TIMEOUT, page_state(driver), app.log[-3000:]))

        # The page sends one kernel_info_request when its websocket opens and
        # waits for the reply. Jupyter Server 1.23 loses a message that
        # reaches it before its own connection to the gateway is under way
        # (GatewayWebSocketClient.on_message chains it on the placeholder
        # future that _connect then replaces), so now and then the page
        # waits for ever: then do what a person would, Kernel > Reconnect.
        deadline = time.monotonic() + PAGE_TIMEOUT
        while True:
            if wait_until(lambda: driver.execute_script(JS_KERNEL_IDLE), 10, interval=0.2):
                kid = driver.execute_script(JS_KERNEL_IDLE)
                break
            if time.monotonic() > deadline:
                raise AssertionError("no idle kernel in %ss; %s\n%s" % (
                    PAGE_TIMEOUT, page_state(driver), app.log[-3000:]))
            driver.execute_script("Jupyter.notebook.kernel.reconnect()")
        assert kid in daemon_kernel_ids(d), "the page's kernel is the daemon's"
        assert kid in daemon_context_kernel_ids(d)

        # type the cell and run it with Shift-Enter, as a person would
        driver.find_element(By.CSS_SELECTOR, ".cell .CodeMirror").click()
        webdriver.ActionChains(driver).send_keys("print(6*7)").perform()
        get_text = "return Jupyter.notebook.get_cell(0).get_text()"
        wait_until(lambda: driver.execute_script(get_text) == "print(6*7)", 10)
        text = driver.execute_script(get_text)
        assert text == "print(6*7)", page_state(driver)
        webdriver.ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER) \
            .key_up(Keys.SHIFT).perform()
        out = wait(lambda drv: drv.execute_script(
            "var o = document.querySelector('.cell .output_subarea.output_stdout pre');"
            "return o ? o.textContent : null;"), "output")
        assert out == "42\n", page_state(driver)
        outputs = driver.execute_script("return Jupyter.notebook.get_cell(0).output_area.outputs")
        assert outputs == [{"output_type": "stream", "name": "stdout", "text": "42\n"}], \
            page_state(driver)
        # the prompt's number comes with the execute_reply, after the output
        wait(lambda drv: "[1]" in drv.find_element(By.CSS_SELECTOR, ".cell .input_prompt").text,
             "In [1] prompt")
        wait(lambda drv: drv.execute_script(JS_KERNEL_IDLE), "idle kernel after the cell")
        driver.execute_script("document.activeElement.blur();")
        driver.save_screenshot(str(shot))
        assert shot.read_bytes().startswith(b"\x89PNG")
        if os.environ.get("KB_SCREENSHOT_DIR"):
            target = Path(os.environ["KB_SCREENSHOT_DIR"])
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, target / shot.name)
    finally:
        try:
            if driver is not None:
                driver.quit()
        finally:
            # chromedriver and Chromium have the browser dir in their
            # arguments (the log, the profile); what quit() left is killed
            if not wait_until(lambda: not pids_with_marker(str(browser)), APP_STOP_TIMEOUT):
                for pid in pids_with_marker(str(browser)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                raise AssertionError("chromedriver or Chromium outlived quit()")
            stop_jupyter_and_daemon(app, d)
