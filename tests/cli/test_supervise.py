"""`kernelbridge serve --supervise` on this machine, without a container
(tests/deploy/test_image.py shows it in the image): a daemon killed by a
signal is started again on the same state dir and adopts its kernels, a
crash loop is slowed by the backoff, a daemon that exits by itself ends the
supervisor with its status, SIGTERM and SIGINT are forwarded, orphans
re-parented to the supervisor are reaped, and --ephemeral is refused."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from outside_testlib import free_tcp_ports  # noqa: E402
BINARY = os.environ.get("KB_BINARY", str(ROOT / "build" / "kernelbridge"))


def free_port():
    """A port the supervised daemon listens on across its restarts: under
    the ephemeral range, so that no other socket is handed it while no
    daemon holds it."""
    return free_tcp_ports(1)[0]


def call(method, url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except OSError:
        return 0, None


def children(pid):
    try:
        return [int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def daemon_of(supervisor):
    """The supervisor's child running the kernelbridge binary (not a kernel)."""
    for pid in children(supervisor):
        try:
            if pathlib.Path(f"/proc/{pid}/exe").resolve() == pathlib.Path(BINARY).resolve():
                return pid
        except OSError:
            pass
    return None


class Supervised:
    def __init__(self, tmp, *args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [BINARY, "serve", "--supervise", "--listen", f"127.0.0.1:{self.port}",
                 "--state-dir", str(tmp / "state"), "--pool", "python=0", *args],
                stdout=subprocess.DEVNULL, stderr=err, env=env)

    def healthy(self, within=30):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if call("GET", self.url + "/health", timeout=1)[0] == 200:
                return
            assert self.proc.poll() is None, self.text()
            time.sleep(0.02)
        raise AssertionError(self.text())

    def daemon(self, within=10):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            pid = daemon_of(self.proc.pid)
            if pid:
                return pid
            time.sleep(0.02)
        raise AssertionError("no daemon below the supervisor\n" + self.text())

    def text(self):
        return self.log.read_text(errors="replace")

    def end(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def supervised(tmp_path):
    made = []

    def start(*args, sub="a"):
        (tmp_path / sub).mkdir(exist_ok=True)
        s = Supervised(tmp_path / sub, *args)
        made.append(s)
        return s

    try:
        yield start
    finally:
        for s in made:
            s.end()


def test_a_killed_daemon_is_started_again_and_adopts_its_kernels(supervised):
    s = supervised()
    s.healthy()
    assert call("POST", s.url + "/contexts", {"language": "python", "context_id": "c"})[0] == 201
    assert call("POST", s.url + "/run", {"context_id": "c", "code": "x = 6 * 7"})[0] == 200
    _, before = call("GET", s.url + "/contexts")
    first = s.daemon()
    os.kill(first, signal.SIGKILL)
    t0 = time.monotonic()
    s.healthy()
    assert time.monotonic() - t0 < 2.0
    assert s.daemon() != first and s.proc.poll() is None
    _, after = call("GET", s.url + "/contexts")
    assert [(c["context_id"], c["pid"], c["generation"]) for c in after["contexts"]] == \
        [(c["context_id"], c["pid"], c["generation"]) for c in before["contexts"]]
    kernel = before["contexts"][0]["pid"]
    assert kernel in children(s.proc.pid), "the kernel is re-parented to the supervisor"
    _, result = call("POST", s.url + "/run", {"context_id": "c", "code": "x"})
    assert result["results"][0]["text"] == "42"
    # an orphan of the kernel's is reaped by the supervisor: no zombie stays
    call("POST", s.url + "/run", {"context_id": "c", "code":
                                  "import subprocess; subprocess.Popen(['sh', '-c', 'sleep 0.2 &'])"})
    time.sleep(1.0)
    states = []
    for pid in children(s.proc.pid):
        try:
            states.append(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    assert "Z" not in states, states
    # SIGTERM is forwarded: the daemon shuts its kernels down and all exit 0
    assert s.end() == 0, s.text()
    assert not pathlib.Path(f"/proc/{kernel}").exists() or \
        pathlib.Path(f"/proc/{kernel}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert "died of SIGKILL" in s.text() and "stopping on SIGTERM" in s.text()


def test_a_crash_loop_backs_off(supervised):
    s = supervised()
    s.healthy()
    starts = []
    for _ in range(4):
        os.kill(s.daemon(), signal.SIGKILL)
        t0 = time.monotonic()
        s.healthy()
        starts.append(time.monotonic() - t0)
    # the first quick death restarts at once; then 250, 500, 1000 ms
    assert starts[0] < 1.0 and starts[1] >= 0.25 and starts[2] >= 0.5 and starts[3] >= 1.0, starts
    assert len(re.findall(r"daemon restarted", s.text())) == 4


def test_sigint_is_forwarded(supervised):
    s = supervised()
    s.healthy()
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(30) == 0
    assert "stopping on SIGINT" in s.text()


def test_a_daemon_that_exits_by_itself_ends_the_supervisor_with_its_status(supervised, tmp_path):
    s = supervised()
    s.healthy()
    # a second daemon on the same state dir is refused (status 2): no restart loop
    second = subprocess.run([BINARY, "serve", "--supervise", "--listen", "127.0.0.1:0", "--state-dir",
                             str(tmp_path / "a" / "state"), "--pool", "python=0"],
                            capture_output=True, text=True, timeout=30,
                            env={k: v for k, v in os.environ.items() if not k.startswith("KB_")})
    assert second.returncode == 2, second.stderr
    assert "restarted" not in second.stderr
    refused = subprocess.run([BINARY, "serve", "--supervise", "--ephemeral"], capture_output=True, text=True,
                             timeout=30)
    assert refused.returncode == 2 and "exclude each other" in refused.stderr
