"""Integration tests of `kernelbridge serve`: the real daemon binary, real kernels.

The binary is $KB_BINARY, else <repo>/build/kernelbridge. Each daemon listens on
127.0.0.1:0 (an ephemeral port) with a private state dir, and is found through
`--port-file`: the daemon writes the bound port there (atomically) once it
listens. Its stdout and stderr go to files, so the request log never fills a
pipe. Only the standard library is used: http.client, socket, threading.

Every response of the native API these suites receive through Daemon (its
JSON bodies and the events of its streams) is checked against the OpenAPI
document, api/openapi.yaml, by OPENAPI.check: a body the document does not
describe fails the test that received it.

Run: pytest-3 tests/integration   (KB_BINARY=/path/to/kernelbridge to pick one)
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KB_BINARY", str(REPO / "build" / "kernelbridge"))

# Every wait in these tests is bounded by one of these.
START_TIMEOUT = 30.0  # daemon up and listening
HTTP_TIMEOUT = 90.0  # one request (a kernel start included)
STOP_TIMEOUT = 30.0  # SIGTERM to exit


class HttpError(AssertionError):
    pass


class OpenApi:
    """The native API's OpenAPI document (api/openapi.yaml) as a checker of
    real responses: the body of each response must fit the document's
    schema for its path, method, status and media type (an undocumented
    status falls to the operation's `default`), and each event of a stream
    the schema its `x-events` names. Paths the document leaves to other
    contracts (Jupyter's /api/..., the console) are not checked, except
    that the native listener's own errors must be the Error body."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        self.routes = []
        for template, item in self.doc["paths"].items():
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
            self.routes.append((re.compile("^%s$" % pattern), template, item))
        self._validators = {}

    def _validator(self, schema):
        key = json.dumps(schema, sort_keys=True)
        if key not in self._validators:
            # refs are "#/components/...": resolved against a root that has them
            root = dict(schema, components=self.doc["components"])
            cls = jsonschema.Draft202012Validator
            cls.check_schema(root)
            self._validators[key] = cls(root, format_checker=cls.FORMAT_CHECKER)
        return self._validators[key]

    def _fit(self, schema, value, what):
        errors = sorted(self._validator(schema).iter_errors(value), key=lambda e: list(e.path))
        if errors:
            raise AssertionError("%s does not fit api/openapi.yaml: %s at %s\n%s" % (
                what, errors[0].message, "/".join(map(str, errors[0].absolute_path)) or "(root)",
                json.dumps(value)[:2000]))

    def operation(self, method, path):
        """(template, operation or None) of a path, or (None, None)."""
        path = urlsplit(path).path
        for regex, template, item in self.routes:
            if regex.match(path):
                return template, item.get(method.lower())
        return None, None

    def response(self, operation, status):
        responses = operation["responses"]
        found = responses.get(str(status)) or responses.get("default")
        assert found is not None, "status %d is not in api/openapi.yaml" % status
        ref = found.get("$ref")
        if ref:
            found = self.doc["components"]["responses"][ref.rsplit("/", 1)[1]]
        return found

    def error_schema(self):
        return {"$ref": "#/components/schemas/Error"}

    def check(self, method, path, status, content_type, body):
        """Assert that a whole response of the native listener fits."""
        what = "%s %s -> %d" % (method, path, status)
        template, operation = self.operation(method, path)
        media = (content_type or "").split(";")[0].strip().lower()
        if operation is None:
            bare = urlsplit(path).path
            if template is None and (bare == "/api" or bare.startswith(OTHER_CONTRACTS)):
                return  # Jupyter's API, the console, MCP: their own contracts
            if status >= 400 and media == "application/json" and method != "HEAD":
                self._fit(self.error_schema(), json.loads(body), what)
            return
        if template == "/mcp":
            return  # MCP's own JSON-RPC messages
        content = self.response(operation, status).get("content")
        if not content:
            assert not body, "%s: api/openapi.yaml says no body, got %r" % (what, body[:200])
            return
        if method == "HEAD":
            return
        assert media in content, "%s: %s is not in api/openapi.yaml (%s)" % (
            what, media or "no Content-Type", ", ".join(content))
        if media == "application/json":
            self._fit(content[media]["schema"], json.loads(body), what)
        elif media == "text/event-stream":
            for event, data in parse_sse(body.decode()):
                self.check_event(method, path, event, data)

    def check_event(self, method, path, event, data):
        """Assert that one event of a stream fits its x-events schema."""
        _, operation = self.operation(method, path)
        if operation is None:
            return
        content = self.response(operation, 200).get("content", {})
        events = content.get("text/event-stream", {}).get("x-events")
        if not events:
            return
        assert event in events, "%s %s: event %r is not in api/openapi.yaml" % (method, path, event)
        self._fit(events[event], json.loads(data), "%s %s event %s" % (method, path, event))


# The paths of the native listener that other tables claim (kb_jupyter.c,
# kb_console.c, kb_mcp_http.c): their answers follow other contracts.
OTHER_CONTRACTS = ("/api/", "/kernelspecs/", "/console", "/mcp")
OPENAPI = OpenApi(REPO / "api" / "openapi.yaml")


def parse_sse(text):
    """(event, data) of each event of a whole Server-Sent Events body."""
    for block in re.split(r"\r?\n\r?\n", text):
        event, data = "message", []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            yield event, "\n".join(data)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def header(self, name):
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def __repr__(self):
        return "<Response %d %r>" % (self.status, self.body[:300])


class _Replay:
    """A response whose body was already read, read again line by line
    (SseStream's reader); the rest (status, headers) is the response's."""

    def __init__(self, response, body):
        self.original = response
        self.lines = body.splitlines(keepends=True)

    def __getattr__(self, name):
        return getattr(self.original, name)

    def readline(self):
        return self.lines.pop(0) if self.lines else b""

    def read(self):
        rest, self.lines = b"".join(self.lines), []
        return rest


def encode(body):
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


class SseEvent:
    def __init__(self, event, data, arrived, comment=None, id=None):
        self.event = event
        self.raw = data
        self.arrived = arrived
        self.comment = comment
        self.id = id

    @property
    def data(self):
        return json.loads(self.raw)

    def __repr__(self):
        return "<SseEvent %s %r>" % (self.event or ":" + str(self.comment), (self.raw or "")[:120])


class SseStream:
    """A Server-Sent Events response read event by event, with arrival times;
    check(event, data), when given, is called on each event (OPENAPI's)."""

    def __init__(self, conn, response, check=None):
        self.conn = conn
        self.response = response
        self.status = response.status
        self.check = check

    def events(self, include_comments=False):
        event, data, ident = None, [], None
        while True:
            line = self.response.readline()
            if not line:
                return
            now = time.monotonic()
            line = line.decode().rstrip("\r\n")
            if line == "":
                if event is not None or data:
                    if self.check and data:
                        self.check(event or "message", "\n".join(data))
                    yield SseEvent(event or "message", "\n".join(data), now, id=ident)
                event, data, ident = None, [], None
            elif line.startswith(":"):
                if include_comments:
                    yield SseEvent(None, None, now, comment=line[1:].strip())
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif line.startswith("id:"):
                ident = line[3:].strip()

    def close(self):
        self.conn.close()


class Daemon:
    """One running `kernelbridge serve`."""

    def __init__(self, args=(), env=None, token=None, workdir=None, state_dir=None):
        self.dir = Path(tempfile.mkdtemp(prefix="kbit-", dir="/tmp"))
        # a state dir of the caller's outlives this daemon (restarts on it)
        self.state_dir = Path(state_dir) if state_dir else self.dir / "state"
        self.port_file = self.dir / "port"
        self.stdout_path = self.dir / "stdout"
        self.stderr_path = self.dir / "stderr"
        self.token = token
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        environ.update(env or {})
        argv = [
            BINARY,
            "serve",
            "--listen",
            "127.0.0.1:0",
            *(() if "--ephemeral" in args else ("--state-dir", str(self.state_dir))),
            "--port-file",
            str(self.port_file),
            *args,
        ]
        # KB_TEST_FORK_TEMPLATE=python (scripts/test.sh's template pass): the
        # same suites with Python kernels forked from a template, except for
        # daemons that map the language to another kernel (or find kernelspecs
        # of their own) or run kernels as other users, which a template
        # refuses at start
        template = os.environ.get("KB_TEST_FORK_TEMPLATE")
        refusing = ("--fork-template", "--kernel", "--kernel-user", "--kernel-uid-range")
        if (template and not any(str(a).split("=")[0] in refusing for a in args)
                and not {"KB_KERNELS", "KB_KERNEL_USER", "KB_KERNEL_UID_RANGE", "JUPYTER_PATH"}
                & set(env or {})):
            argv += ["--fork-template", template]
        if token is not None and not any(a == "--token-file" for a in args):
            token_file = self.dir / "token"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            argv += ["--token-file", str(token_file)]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=err, env=environ, cwd=workdir or self.dir
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.port_file.exists():
            if self.proc.poll() is not None:
                raise AssertionError(
                    "daemon exited with %s before listening:\n%s" % (self.proc.returncode, self.log)
                )
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("daemon did not listen within %ss:\n%s" % (START_TIMEOUT, self.log))
            time.sleep(0.02)
        self.port = int(self.port_file.read_text().strip())
        self.url = "http://127.0.0.1:%d" % self.port

    @property
    def log(self):
        return self.stderr_path.read_text(errors="replace")

    @property
    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    def connect(self, timeout=HTTP_TIMEOUT):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def _headers(self, headers, token):
        h = {"Content-Type": "application/json"}
        token = self.token if token is None else token
        if token:
            h["Authorization"] = "Bearer " + token
        h.update(headers or {})
        return h

    def request(self, method, path, body=None, headers=None, token=None, conn=None, timeout=HTTP_TIMEOUT):
        own = conn is None
        conn = conn or self.connect(timeout)
        try:
            conn.request(method, path, encode(body), self._headers(headers, token))
            r = conn.getresponse()
            response = Response(r.status, r.getheaders(), r.read())
            if conn.port == self.port:
                OPENAPI.check(method, path, response.status, response.header("Content-Type"),
                              response.body)
            return response
        finally:
            if own:
                conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def ok(self, method, path, body=None, status=200, **kw):
        r = self.request(method, path, body, **kw)
        if r.status != status:
            raise HttpError("%s %s: expected %d, got %r" % (method, path, status, r))
        return r.json if r.body else None

    def run(self, code, **fields):
        """POST /run as JSON; returns the InterpreterResult."""
        return self.ok("POST", "/run", dict(code=code, **fields))

    def stream(self, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT):
        """Open an event stream; the caller reads .events() and closes it."""
        conn = self.connect(timeout)
        h = self._headers(headers, None)
        h["Accept"] = "text/event-stream"
        conn.request(method, path, encode(body), h)
        response = conn.getresponse()
        media = (response.getheader("Content-Type") or "").split(";")[0].strip()
        if media != "text/event-stream":  # an error before the stream, or JSON
            stream = SseStream(conn, response)
            body = response.read()
            OPENAPI.check(method, path, response.status, response.getheader("Content-Type"), body)
            stream.response = _Replay(response, body)
            return stream
        return SseStream(conn, response, lambda event, data: OPENAPI.check_event(method, path, event, data))

    def run_stream(self, code, **fields):
        return self.stream("POST", "/run", dict(code=code, **fields))

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT):
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)

    def close(self):
        """Stop the daemon; it must exit 0 and have reported no memory error
        (for builds with -DKB_SANITIZE=ON)."""
        problem = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                problem = "did not stop within %ss of SIGTERM" % STOP_TIMEOUT
        if problem is None and self.proc.returncode != 0:
            problem = "exited with status %s" % self.proc.returncode
        log = self.log
        if "Sanitizer" in log or "runtime error:" in log:
            problem = "reported a sanitizer error"
        if problem is None:
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        raise AssertionError("daemon %s; its log (kept in %s):\n%s"
                             % (problem, self.dir, log[-20000:]))


def error_of(response, status, code):
    """Assert a typed JSON error of SPEC section 5; returns its body."""
    assert response.status == status, response
    assert (response.header("Content-Type") or "").startswith("application/json"), response.headers
    body = response.json
    assert body["code"] == code, body
    assert body["status_code"] == status, body
    assert isinstance(body["message"], str) and body["message"], body
    for key in ("path", "method", "timestamp"):
        assert isinstance(body[key], str) and body[key], body
    return body


def pid_alive(pid):
    """True while /proc/<pid> is a live (non-zombie) process."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def live_argvs():
    """(pid, argv as bytes) of every live process."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if pid_alive(int(entry)):
            yield int(entry), argv


def pids_with_arg_under(prefix, containing=None):
    """Live processes with a command-line argument that starts with prefix
    (a kernel's connection file under a state dir) and, when containing is
    given, one that contains it (a kernelspec's name)."""
    inside = str(prefix).encode()
    needle = containing.encode() if containing else b""
    return sorted(pid for pid, argv in live_argvs()
                  if any(arg.startswith(inside) for arg in argv)
                  and any(needle in arg for arg in argv))


def pids_with_marker(marker):
    """Live processes with marker anywhere in their command line."""
    needle = marker.encode()
    return sorted(pid for pid, argv in live_argvs() if any(needle in arg for arg in argv))


def status_kib(pid, field):
    """A KiB figure of /proc/PID/status: VmRSS, VmHWM, RssAnon..."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for %d" % (field, pid))


def rss_kib(pid):
    """A process's resident memory (VmRSS), KiB."""
    return status_kib(pid, "VmRSS")


def wait_until(predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def raw_http(port, data, timeout=30.0):
    """Send raw bytes on a fresh socket; returns all that comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def sse_post(port, body, rcvbuf):
    """POST /run for text/event-stream on a socket whose receive buffer is
    rcvbuf bytes (set before connecting), nothing read yet; body is JSON."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.connect(("127.0.0.1", port))
        data = json.dumps(body).encode()
        sock.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % len(data) + data)
    except BaseException:
        sock.close()
        raise
    return sock


def read_chunked_body(sock, timeout):
    """Reads a chunked HTTP response to its last chunk; returns its body,
    the framing undone (by offsets: bodies of ~100 MB are read here)."""
    data = bytearray()
    sock.settimeout(timeout)
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(1 << 20)
        assert chunk, "the stream ended early"
        data += chunk
    raw = bytes(data)
    assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
    at = raw.index(b"\r\n\r\n") + 4
    chunks = []
    while True:
        eol = raw.index(b"\r\n", at)
        size = int(raw[at:eol], 16)
        if size == 0:
            return b"".join(chunks)
        chunks.append(raw[eol + 2:eol + 2 + size])
        at = eol + 2 + size + 2


def system_lines(d, process_id):
    """The system lines of a record's log."""
    frames = d.ok("GET", "/processes/%s/logs" % process_id)["frames"]
    return [f["data"] for f in frames if f["channel"] == "system"]


def dropped_of(d, process_id):
    """The byte count of the system line that says what the run dropped (0 when none)."""
    return dropped_in(system_lines(d, process_id))


def dropped_in(lines):
    """The byte count said by the one line among a run's system lines that
    says what it dropped (0 when none)."""
    said = [s for s in lines if "bytes of output were dropped" in s]
    assert len(said) <= 1, said
    return int(said[0].split()[0]) if said else 0


@pytest.fixture
def daemon_factory():
    """Start daemons with given args / env; all are stopped at the end."""
    started = []

    def start(*args, env=None, token=None, workdir=None, state_dir=None):
        d = Daemon(args, env=env, token=token, workdir=workdir, state_dir=state_dir)
        started.append(d)
        return d

    yield start
    for d in started:
        d.close()


@pytest.fixture
def daemon(daemon_factory):
    """A fresh daemon with the default settings, for tests that change state."""
    return daemon_factory()


@pytest.fixture(scope="module")
def shared_daemon():
    """One daemon per test module, for tests that only read or validate."""
    d = Daemon()
    yield d
    d.close()
