"""The CLI against a running daemon, as a person at a terminal uses it:
`kernelbridge contexts`, `ps` and `logs [--follow]`, with the daemon's URL
and token, and what they say when the daemon refuses or is not there."""
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from clilib import BINARY, at, kb, start_daemon, wait_until, write_token_file

TOKEN = "cli-s3cret"


@pytest.fixture(scope="module")
def daemon():
    # as docs/getting-started.md starts it, with a token: no JUPYTER_PATH
    d = start_daemon(TOKEN)
    yield d
    d.close()


@pytest.fixture(scope="module")
def token_file(daemon):
    return write_token_file(daemon, TOKEN)


def test_help_and_usage():
    top = kb("--help")
    for command in ("contexts", "ps", "logs"):
        assert command in top.stdout
        done = kb(command, "--help")
        assert done.returncode == 0 and "--url" in done.stdout and "--token-file" in done.stdout
    assert "--follow" in kb("logs", "--help").stdout
    assert kb("logs").returncode == 2  # the process id is required
    assert kb("ps", "extra").returncode == 2
    assert kb("contexts", "--url", "https://example.com").returncode == 2


def test_contexts_table_and_json(daemon, token_file):
    ctx = daemon.ok("POST", "/contexts", {"language": "python", "context_id": "cli-ctx"},
                    status=201)
    table = at(daemon, token_file, "contexts")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:5] == ["ID", "LANGUAGE", "STATE", "GEN", "MEMORY"]
    row = next(r for r in rows if r.startswith("cli-ctx "))
    assert row.split()[1:4] == ["python", "idle", "1"], row
    assert row.endswith(" " + ctx["cwd"]), row
    listed = json.loads(at(daemon, token_file, "contexts", "--json").stdout)["contexts"]
    assert "cli-ctx" in [c["context_id"] for c in listed]
    assert "default-python" not in [c["context_id"] for c in listed]
    daemon.run("1")  # starts default-python
    every = json.loads(at(daemon, token_file, "contexts", "--all", "--json").stdout)["contexts"]
    assert {"cli-ctx", "default-python"} <= {c["context_id"] for c in every}


def test_deno_is_found_as_the_readme_starts_the_daemon(daemon, token_file):
    # setup.sh puts Deno's kernelspec where Jupyter looks: no JUPYTER_PATH needed
    ctx = daemon.ok("POST", "/contexts", {"language": "typescript", "context_id": "cli-ts"},
                    status=201)
    assert ctx["kernel_name"] == "deno"
    result = daemon.run("6 * 7", context_id="cli-ts")
    assert result["results"][0]["text"] == "42", result
    row = next(r for r in at(daemon, token_file, "contexts").stdout.splitlines()
               if r.startswith("cli-ts "))
    assert row.split()[1] == "typescript"
    daemon.ok("DELETE", "/contexts/cli-ts", status=204)


def test_ps_lists_a_run(daemon, token_file):
    pid = daemon.run("print('ps me')")["process"]["process_id"]
    table = at(daemon, token_file, "ps")
    assert table.returncode == 0, table.stderr
    row = next(r for r in table.stdout.splitlines() if r.startswith(pid + " "))
    assert row.split()[1:4] == ["default-python", "exited", "0"], row
    records = json.loads(at(daemon, token_file, "ps", "--json").stdout)["processes"]
    mine = next(p for p in records if p["process_id"] == pid)
    assert mine["state"] == "terminal" and mine["reason"] == "exited"
    running = json.loads(at(daemon, token_file, "ps", "--state", "running", "--json").stdout)
    assert pid not in [p["process_id"] for p in running["processes"]]


def test_logs_of_a_finished_run(daemon, token_file):
    code = "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nprint('more out')"
    pid = daemon.run(code)["process"]["process_id"]
    done = at(daemon, token_file, "logs", pid)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "to out\nmore out\n"
    assert done.stderr == "to err\n"


def test_logs_follow_prints_lines_as_they_come(daemon, token_file):
    code = ("import sys, time\n"
            "for i in range(4):\n"
            "    print('line', i, flush=True)\n"
            "    time.sleep(0.8)\n"
            "print('bye', file=sys.stderr)\n")
    results = []
    runner = threading.Thread(target=lambda: results.append(daemon.run(code)))
    runner.start()
    try:
        def running():
            procs = daemon.ok("GET", "/processes?state=running")["processes"]
            return procs[0]["process_id"] if procs else None
        assert wait_until(running, 30)
        pid = running()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        environ.update(KB_URL=daemon.url, KB_TOKEN=TOKEN)  # the environment's way
        follow = subprocess.Popen([BINARY, "logs", "--follow", pid], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=environ)
        first = follow.stdout.readline()
        assert first == "line 0\n"
        # the first line came while the run goes on
        assert daemon.ok("GET", "/processes/%s" % pid)["state"] == "running"
        assert follow.poll() is None
        out, err = follow.communicate(timeout=30)
        assert follow.returncode == 0, err
        assert first + out == "line 0\nline 1\nline 2\nline 3\n"
        assert err == "bye\n"
        assert daemon.ok("GET", "/processes/%s" % pid)["state"] == "terminal"
    finally:
        runner.join(60)
    assert results and results[0]["error"] is None


def test_errors_of_the_daemon(daemon, token_file, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    for command in (("contexts",), ("ps",), ("logs", "prc_x"), ("logs", "--follow", "prc_x")):
        done = kb(*command, "--url", daemon.url, "--token-file", str(wrong))
        assert done.returncode == 1 and "UNAUTHORIZED" in done.stderr, (command, done)
    no_token = kb("ps", "--url", daemon.url)
    assert no_token.returncode == 1 and "UNAUTHORIZED" in no_token.stderr
    for follow in ((), ("--follow",)):
        done = at(daemon, token_file, "logs", *follow, "prc_nope")
        assert done.returncode == 1, done
        assert "PROCESS_NOT_FOUND" in done.stderr and "prc_nope" in done.stderr, done.stderr


def test_no_daemon_is_an_error_at_once():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for command in (("contexts",), ("ps",), ("logs", "--follow", "prc_x")):
        started = time.monotonic()
        done = kb(*command, env={"KB_URL": "http://127.0.0.1:%d" % port}, timeout=20)
        assert time.monotonic() - started < 10
        assert done.returncode == 1, done
        assert "cannot reach the daemon at http://127.0.0.1:%d" % port in done.stderr


def test_a_peer_that_closes_without_answering_is_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]

        def close_each():  # reads the request, answers nothing
            conn, _ = s.accept()
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            conn.close()
        closer = threading.Thread(target=close_each)
        closer.start()
        done = kb("ps", "--url", "http://127.0.0.1:%d" % port, timeout=20)
        closer.join(10)
    assert done.returncode == 1 and "closed the connection" in done.stderr, done
