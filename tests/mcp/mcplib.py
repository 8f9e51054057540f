"""The real daemon for the raw-HTTP tests of /mcp: `kernelbridge serve` on
127.0.0.1:0 in a private temp dir (found through --port-file), a token,
the KB_* variables of the environment removed, stopped with SIGTERM
(status 0). Requests go through http.client, byte for byte as given."""

import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KB_BINARY", str(REPO / "build" / "kernelbridge"))
TOKEN = "mcp-raw-token"
START_TIMEOUT = 30.0
HTTP_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
NEWEST = "2025-11-25"


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<Reply %d %r>" % (self.status, self.body[:300])


class Daemon:
    def __init__(self, *args):
        self.dir = Path(tempfile.mkdtemp(prefix="kbmcp-"))
        (self.dir / "token").write_text(TOKEN + "\n")
        os.chmod(self.dir / "token", 0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        argv = [BINARY, "serve", "--listen", "127.0.0.1:0", "--port-file", str(self.dir / "port"),
                "--state-dir", str(self.dir / "state"), "--token-file", str(self.dir / "token"),
                *args]
        self.stderr = open(self.dir / "stderr", "wb")
        self.proc = subprocess.Popen(argv, cwd=self.dir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.stderr)
        deadline = time.monotonic() + START_TIMEOUT
        port_file = self.dir / "port"
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("daemon did not listen: " + self.log())
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    def log(self):
        return (self.dir / "stderr").read_text(errors="replace")

    def request(self, method, body=None, headers=None, token=TOKEN, path="/mcp", timeout=HTTP_TIMEOUT):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            all_headers = {"Accept": "application/json, text/event-stream"}
            if body is not None:
                all_headers["Content-Type"] = "application/json"
            if token:
                all_headers["Authorization"] = "Bearer " + token
            all_headers.update(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            elif isinstance(body, str):
                body = body.encode()
            conn.request(method, path, body=body, headers=all_headers)
            r = conn.getresponse()
            return Reply(r.status, r.getheaders(), r.read())
        finally:
            conn.close()

    def post(self, body, session=None, version=None, **kw):
        headers = dict(kw.pop("headers", {}))
        if session:
            headers["Mcp-Session-Id"] = session
        if version:
            headers["MCP-Protocol-Version"] = version
        return self.request("POST", body, headers=headers, **kw)

    def initialize(self, version=NEWEST):
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": version, "capabilities": {},
                                  "clientInfo": {"name": "raw", "version": "1"}}})
        assert r.status == 200, r
        session = r.headers["mcp-session-id"]
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                         session=session).status == 202
        return session, r.json["result"]["protocolVersion"]

    def call(self, session, name, arguments, rid=1, version=None):
        r = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}},
                      session=session, version=version)
        assert r.status == 200, r
        return r.json

    def stop(self):
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    code = self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    raise AssertionError("daemon did not stop on SIGTERM: " + self.log())
                assert code == 0, "daemon exit status %d: %s" % (code, self.log())
                # builds with -DKB_SANITIZE=ON report memory errors in the log
                assert "Sanitizer" not in self.log() and "runtime error:" not in self.log(), \
                    self.log()
        finally:
            self.stderr.close()
            shutil.rmtree(self.dir, ignore_errors=True)
