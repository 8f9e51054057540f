"""`kernelbridge mcp` through raw lines (SPEC section 14): bad input on
stdio gets JSON-RPC's errors and the process goes on; stdout carries
nothing but messages; a relay (--url) turns the daemon's refusals into the
request's JSON-RPC error; SIGTERM ends it at once, its kernels shut down."""

import json
import os
import signal
import subprocess
import time

from .mcplib import BINARY, TOKEN, Daemon

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


class Stdio:
    def __init__(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        self.proc = subprocess.Popen([BINARY, "mcp", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def send(self, line):
        self.proc.stdin.write(line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode())
        self.proc.stdin.flush()

    def answer(self):
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()
        return json.loads(line)

    def close(self, timeout=30):
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            code = self.proc.wait(timeout)
            err = self.proc.stderr.read().decode(errors="replace")
            assert "Sanitizer" not in err and "runtime error:" not in err, err
            return code, self.proc.stdout.read()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def test_bad_lines_in_process():
    s = Stdio()
    try:
        s.send(b"{not json\n")
        assert s.answer()["error"]["code"] == -32700
        s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        answer = s.answer()
        assert answer["id"] == 2 and answer["error"]["code"] == -32600  # initialize first
        s.send(INIT)
        assert s.answer()["result"]["protocolVersion"] == "2025-06-18"
        s.send(b"\n")  # an empty line is nothing
        s.send(b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"' + b"y" * (17 << 20)
               + b'"}}\n')
        answer = s.answer()
        assert answer["error"]["code"] == -32600
        assert answer["error"]["data"]["code"] == "PAYLOAD_TOO_LARGE"
        s.send([{"jsonrpc": "2.0", "id": 4, "method": "ping"}])  # 2025-06-18: no batches
        assert s.answer()["error"]["code"] == -32600
        s.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"code": 5}}})
        answer = s.answer()
        assert answer["id"] == 5 and answer["error"]["data"]["field"] == "code"
        s.send({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        assert s.answer() == {"jsonrpc": "2.0", "id": 6, "result": {}}
    finally:
        code, rest = s.close()
    assert code == 0 and rest == b""


def test_sigterm_stops_a_run_and_its_kernel():
    s = Stdio()
    try:
        s.send(INIT)
        s.answer()
        s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "run_code",
                           "arguments": {"code": "import os\nprint(os.getpid(), flush=True)\n"
                                                 "import time\ntime.sleep(60)"}}})
        deadline = time.monotonic() + 60
        kernel = None
        while kernel is None and time.monotonic() < deadline:  # the run is on
            out = subprocess.run(["pgrep", "-P", str(s.proc.pid)], capture_output=True,
                                 text=True).stdout.split()
            kernel = int(out[0]) if out else None
            time.sleep(0.2)
        assert kernel, "no kernel started"
        time.sleep(1.0)
        started = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        answer = s.answer()  # the call answers: the run ended as the service stopped
        assert answer["id"] == 2
        assert answer["result"]["structuredContent"]["process"]["reason"] == "sandbox_stopped"
        assert s.proc.wait(30) == 0
        assert time.monotonic() - started < 15
        try:
            os.kill(kernel, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, "the kernel outlived kernelbridge mcp"
    finally:
        s.close()


def test_relay_turns_refusals_into_errors():
    d = Daemon("--pool", "python=0")
    bad = d.dir / "wrong-token"
    bad.write_text("not-the-token\n")
    try:
        s = Stdio("--url", f"http://127.0.0.1:{d.port}", "--token-file", str(bad))
        try:
            s.send(INIT)
            answer = s.answer()
            assert answer["id"] == 1 and answer["error"]["data"]["code"] == "UNAUTHORIZED"
        finally:
            s.close()
        s = Stdio("--url", f"http://127.0.0.1:{d.port}", "--token-file", str(d.dir / "token"))
        try:
            s.send(INIT)
            assert s.answer()["result"]["protocolVersion"] == "2025-06-18"
            s.send({"jsonrpc": "2.0", "id": 2, "method": "nope"})
            assert s.answer()["error"]["code"] == -32601
            s.send(b"[}\n")
            assert s.answer()["error"]["code"] == -32700
        finally:
            s.close()
        # the relay deleted its session at the end
        assert "DELETE /mcp 204" in d.log()
        assert TOKEN not in d.log()
    finally:
        d.stop()
