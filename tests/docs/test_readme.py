"""README.md stays short and true: its set-up commands as they are, its
links resolving, and its first session (the Python SDK's block and the curl
block, and getting-started's Python block) run against a real daemon with
the outputs their comments promise."""

import base64
import json
import os
import re
import subprocess

import pytest

from .docs_testlib import ROOT, Daemon, blocks, links

README = ROOT / "README.md"
SDK_SRC = ROOT / "sdk" / "python" / "src"
RUN_TIMEOUT = 300

SETUP = """\
# set up, build and run the daemon with the default Python kernel (Debian 12, as root)
./scripts/setup.sh && cmake -S . -B build && cmake --build build -j2 && ./build/kernelbridge serve --preload python

# set up, build and run every test (what CI runs)
./scripts/setup.sh && ./scripts/test.sh
"""


@pytest.fixture(scope="module")
def docs_daemon():
    d = Daemon()
    try:
        yield d
    finally:
        d.close()


def test_readme_is_short_and_starts_with_the_setup_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 150, len(text.splitlines())
    assert blocks(README, "sh")[0] == SETUP
    assert text.index(SETUP) < text.index("## ")


def test_readme_links_resolve():
    targets = links(README)
    assert len(targets) >= 15, targets
    for target in targets:
        path = (ROOT / target.split("#")[0]).resolve()
        assert path.is_file(), target


def run_python(code, daemon, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env.update(KB_URL=daemon.url, PYTHONPATH=str(SDK_SRC))
    done = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr + "\n" + daemon.log[-3000:]
    return done.stdout


def test_readme_python_session_runs(docs_daemon, tmp_path):
    (code,) = blocks(README, "python")
    for call in ("create_context(", "isolated=True", "on_stdout=", "plt.plot", "1 / 0"):
        assert call in code, call
    out = run_python(code, docs_daemon, tmp_path).splitlines()
    assert out == ["42", "ZeroDivisionError division by zero", "exited",
                   "stdout: 0", "stdout: 1", "stdout: 2"], out
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_getting_started_python_session_runs(docs_daemon, tmp_path):
    (code,) = blocks(ROOT / "docs" / "getting-started.md", "python")
    out = run_python(code, docs_daemon, tmp_path).splitlines()
    assert out == ["42", "ZeroDivisionError"], out


def curl_commands(block):
    """The block's commands, continuation lines joined, comment lines dropped
    (a comment after a command is bash's to skip)."""
    commands, current = [], ""
    for line in block.splitlines():
        if not current and line.lstrip().startswith("#"):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def test_readme_curl_session_runs(docs_daemon):
    (block,) = [b for b in blocks(README, "sh") if "curl" in b]
    commands = curl_commands(block)
    assert len(commands) == 9, commands
    outputs, process_id = [], None
    for command in commands:
        if "prc_..." in command:
            assert process_id, command
            command = command.replace("prc_...", process_id)
        command = command.replace("localhost:8899", "127.0.0.1:%d" % docs_daemon.port)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
        m = re.search(r'"process_id":"(prc_[0-9a-f]+)"', done.stdout)
        process_id = m[1] if m else process_id
    created, first, second, plot, error, isolated, stream, logs, deleted = outputs
    assert json.loads(created)["context_id"] == "demo"
    assert json.loads(first)["error"] is None
    second = json.loads(second)
    assert (second["results"][0]["text"], second["results"][0]["is_main_result"]) == ("42", True)
    assert second["execution_count"] == 2
    png = json.loads(plot)["results"][0]
    assert base64.b64decode(png["png"])[:4] == b"\x89PNG"
    assert png["chart"]["type"] == "line"
    error = json.loads(error)["error"]
    assert (error["name"], error["value"]) == ("ZeroDivisionError", "division by zero")
    isolated = json.loads(isolated)
    assert isolated["results"][0]["is_main_result"] and isolated["process"]["reason"] == "exited"
    events = re.findall(r"^event: (\w+)$", stream, re.M)
    assert events == ["start", "stdout", "stdout", "stdout", "result"], events
    frames = json.loads(logs)["frames"]
    assert [f["data"] for f in frames if f["channel"] == "stdout"] == ["0\n", "1\n", "2\n"]
    assert deleted == ""
