"""Security of SPEC section 6: Bearer tokens, /health open, loopback by
default, non-loopback refused without a token."""

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import BINARY, error_of, wait_until

TOKEN = "s3cret-token-for-tests"


def test_token_required_except_health(daemon_factory):
    d = daemon_factory(token=TOKEN)
    # /health needs none.
    assert d.get("/health", token="").status == 200
    for method, path, body in [
        ("GET", "/kernelspecs", None),
        ("GET", "/contexts", None),
        ("POST", "/run", {"code": "1"}),
        ("GET", "/processes", None),
        ("GET", "/nope", None),
        ("DELETE", "/contexts/default-python", None),
    ]:
        r = d.request(method, path, body, token="")
        error_of(r, 401, "UNAUTHORIZED")
        assert (r.header("WWW-Authenticate") or "").startswith("Bearer"), r.headers
        for wrong in ("wrong", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "x" * 2000):
            error_of(d.request(method, path, body, token=wrong), 401, "UNAUTHORIZED")
    # Not a Bearer scheme.
    r = d.request("GET", "/contexts", headers={"Authorization": "Basic " + TOKEN}, token="")
    error_of(r, 401, "UNAUTHORIZED")
    # The right token works, scheme name in any case.
    assert d.get("/kernelspecs").status == 200
    r = d.request("GET", "/contexts", headers={"Authorization": "bearer " + TOKEN}, token="")
    assert r.status == 200, r
    assert d.run("1 + 1")["results"][0]["text"] == "2"


def test_no_token_means_open(shared_daemon):
    assert shared_daemon.get("/contexts").status == 200


def test_token_from_environment_is_hidden_from_kernels(daemon_factory):
    d = daemon_factory(env={"KB_TOKEN": TOKEN})
    d.token = TOKEN
    error_of(d.get("/contexts", token="bad"), 401, "UNAUTHORIZED")
    out = d.run("import os; print(sorted(k for k in os.environ if k.startswith('KB_')))")
    assert out["logs"]["stdout"].strip() == "[]", out
    out = d.run("import os; print(any('%s' in v for v in os.environ.values()))" % TOKEN)
    assert out["logs"]["stdout"].strip() == "False", out


@pytest.fixture
def serve():
    """Start `kernelbridge serve ARGS` with a private dir; returns (proc, dir)."""
    dirs = []

    def start(args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        tmp = tempfile.mkdtemp(prefix="kbit-", dir="/tmp")
        dirs.append(tmp)
        argv = [BINARY, "serve", "--state-dir", tmp + "/s", "--port-file", tmp + "/port", *args]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(proc)
        return proc, Path(tmp)

    procs = []
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    for tmp in dirs:
        shutil.rmtree(tmp, ignore_errors=True)


def test_non_loopback_without_token_is_refused(serve):
    proc, _ = serve(["--listen", "0.0.0.0:0"])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, (out, err)
    assert b"token" in err, err


def test_non_loopback_with_insecure_starts(serve):
    proc, tmp = serve(["--listen", "0.0.0.0:0", "--insecure"])
    try:
        assert wait_until(lambda: (tmp / "port").exists(), 30), proc.stderr.read1()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_non_loopback_with_token_starts(serve, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    proc, tmp = serve(["--listen", "0.0.0.0:0", "--token-file", str(token_file)])
    try:
        assert wait_until(lambda: (tmp / "port").exists(), 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_unreadable_or_empty_token_file_is_refused(serve, tmp_path):
    proc, _ = serve(["--token-file", str(tmp_path / "missing")])
    proc.communicate(timeout=30)
    assert proc.returncode == 2
    empty = tmp_path / "empty"
    empty.write_text("\n")
    proc, _ = serve(["--token-file", str(empty)])
    proc.communicate(timeout=30)
    assert proc.returncode == 2


def test_default_listen_is_loopback(serve):
    """Without --listen the daemon binds 127.0.0.1:8899 (if that port is
    free here); it never binds a public address by default."""
    proc, tmp = serve([])
    try:
        started = wait_until(lambda: (tmp / "port").exists() or proc.poll() is not None, 30)
        assert started
        if proc.poll() is None:
            assert (tmp / "port").read_text().strip() == "8899"
            listening = open("/proc/net/tcp").read()
            # 0100007F:22C3 is 127.0.0.1:8899 in /proc/net/tcp notation.
            assert "0100007F:22C3" in listening
            assert "00000000:22C3" not in listening
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    if proc.returncode != 0:
        # The port is taken on this machine: the message still shows where
        # the daemon tried to listen.
        assert b"127.0.0.1" in err and b"8899" in err, err
