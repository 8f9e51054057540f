"""What the docs tests share: the tree's paths, the Markdown pages, their
fenced blocks and relative links, and one real daemon started for a test."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BINARY = os.environ.get("KB_BINARY", str(ROOT / "build" / "kernelbridge"))

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
# [text](target) and ![alt](target), not inside code
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def blocks(path, lang):
    """The fenced blocks of one language in a Markdown file, in order."""
    return [body for kind, body in FENCE.findall(Path(path).read_text()) if kind == lang]


def without_code(text):
    """Markdown text with fenced blocks and code spans blanked out."""
    text = FENCE.sub("", text)
    return re.sub(r"`[^`\n]*`", "", text)


def links(path):
    """The relative link targets of a Markdown file (no scheme, no mailto)."""
    found = []
    for target in LINK.findall(without_code(Path(path).read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        found.append(target)
    return found


def pages():
    """Every Markdown page under docs/, as a path relative to docs/."""
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


class Daemon:
    """One `kernelbridge serve` on 127.0.0.1:0 with a private state dir,
    found through --port-file; stopped by close()."""

    def __init__(self, *args):
        self.dir = Path(tempfile.mkdtemp(prefix="kbdocs-", dir="/tmp"))
        port_file = self.dir / "port"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        argv = [BINARY, "serve", "--listen", "127.0.0.1:0", "--state-dir", str(self.dir / "state"),
                "--port-file", str(port_file), *args]
        self.err_path = self.dir / "stderr"
        with open(self.dir / "stdout", "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=self.dir)
        deadline = time.monotonic() + START_TIMEOUT
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError("daemon did not listen:\n" + self.log)
            time.sleep(0.02)
        self.port = int(port_file.read_text().strip())
        self.url = "http://127.0.0.1:%d" % self.port

    @property
    def log(self):
        return self.err_path.read_text(errors="replace")

    def close(self):
        """SIGTERM, then SIGKILL if it hangs; the daemon must exit 0."""
        status = self.proc.poll()
        if status is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                status = self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
                status = "hung"
        log = self.log
        shutil.rmtree(self.dir, ignore_errors=True)
        assert status == 0, "daemon exit status %s:\n%s" % (status, log[-5000:])
