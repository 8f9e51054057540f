"""What the CLI's tests against a running daemon share: the binary, the
integration tests' daemon (tests/integration/conftest.py's Daemon, started
as the README starts it, with a token), a command run with the KB_*
variables of the environment removed, and one run against a daemon given
its URL and a token file."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KB_BINARY", str(ROOT / "build" / "kernelbridge"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import Daemon, wait_until  # noqa: E402,F401  (the integration tests' daemon)


def kb(*args, env=None, timeout=60):
    """`kernelbridge ARGS...` without the environment's KB_* variables."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    environ.update(env or {})
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout,
                          env=environ)


def start_daemon(token, *args):
    """A daemon as docs/getting-started.md starts it (no JUPYTER_PATH), with token."""
    return Daemon(tuple(args), env={"JUPYTER_PATH": ""}, token=token)


def write_token_file(daemon, token):
    """The token in a file of daemon's private dir, for --token-file."""
    path = daemon.dir / "client-token"
    path.write_text(token + "\n")
    return str(path)


def at(daemon, token_file, *args, **kw):
    """A command run against daemon, given its URL and token file."""
    return kb(*args, "--url", daemon.url, "--token-file", token_file, **kw)
