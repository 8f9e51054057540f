#!/usr/bin/python3
"""The bash kernel's round trip against the cost it saves (concept: bash).

Side by side, in interleaved rounds on the same machine (which goes first
alternates):
  (a) POST /run `echo 1` on a bash context of a kernelbridge daemon, over one
      kept-alive HTTP connection (the whole result read and checked);
  (b) a fresh `bash -c 'echo 1'` process: fork, exec, its output read, wait
      (subprocess.run), what a caller pays per command without a kernel.
Prints p50 and p90 of each and the ratio of the p50s; the target (in
targets.py): (a) p50 at most 3x (b) p50 (state is what the kernel buys; it
must not cost much more than a process).

    /usr/bin/python3 bench/bash.py [-n 500] [--warmup 20] [--binary PATH]
        [--results PATH] [--json FILE]

The daemon is started here (--ephemeral, no pool) with the repository's
kernelspecs/ on JUPYTER_PATH, so that its bash kernel is the one measured.
"""
import os
import shutil
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, sidebyside  # noqa: E402
from kbbench.daemon import Daemon  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct  # noqa: E402


def through_daemon(d: Daemon, context_id: str) -> float:
    """(a): seconds for one POST /run `echo 1`, its result checked."""
    started = time.perf_counter()
    result = d.ok("POST", "/run", {"code": "echo 1", "context_id": context_id})
    elapsed = time.perf_counter() - started
    if result["logs"]["stdout"] != "1\n" or result["error"] is not None:
        sys.exit("unexpected result: %r" % result)
    return elapsed


def fresh_process(bash: str) -> float:
    """(b): seconds for one fresh `bash -c 'echo 1'`, its output checked."""
    started = time.perf_counter()
    done = subprocess.run([bash, "-c", "echo 1"], stdout=subprocess.PIPE, check=True)
    elapsed = time.perf_counter() - started
    if done.stdout != b"1\n":
        sys.exit("unexpected output: %r" % done.stdout)
    return elapsed


def measure(d: Daemon, rounds: int, warmup: int) -> dict[str, Any]:
    """Interleaved rounds of (a) and (b): their times in seconds."""
    bash = shutil.which("bash") or "/bin/bash"
    context = d.ok("POST", "/contexts", {"language": "bash"})
    context_id = context["context_id"]
    daemon_s, process_s = sidebyside.interleaved(rounds, warmup,
                                                 lambda: through_daemon(d, context_id),
                                                 lambda: fresh_process(bash))
    return {"rounds": rounds, "kernel_name": context["kernel_name"], "daemon_s": daemon_s,
            "process_s": process_s, "loadavg": list(os.getloadavg())}


def figures(res: dict[str, Any]) -> Figures:
    a, b = pct(res["daemon_s"], 50), pct(res["process_s"], 50)
    return {
        "echo.daemon_p50_ms": figure("POST /run `echo 1` on a bash context, p50", a * 1e3, "ms"),
        "echo.process_p50_ms": figure("a fresh `bash -c 'echo 1'` process, p50", b * 1e3, "ms"),
        "echo.ratio_p50": figure("the daemon's p50 ÷ the fresh process's p50", a / b, "x"),
    }


def tables(res: dict[str, Any]) -> list[str]:
    lines = ["bash `echo 1`: %d interleaved rounds, kernel %s, load average %s"
             % (res["rounds"], res["kernel_name"], " ".join("%.2f" % x for x in res["loadavg"])),
             ""]
    return lines + sidebyside.p50_p90_rows((
        ("(a) POST /run on a bash context, kept-alive HTTP", res["daemon_s"]),
        ("(b) fresh `bash -c 'echo 1'` (subprocess.run)", res["process_s"])))


def main() -> None:
    a = sidebyside.rounds_parser(__doc__).parse_args()
    a.binary = cli.check_binary(a.binary)
    tmp = cli.setup("kbsh")
    env = machine.environment(a.binary, cli.ROOT)
    jupyter = os.path.join(tmp, "jupyter")
    os.mkdir(jupyter)
    os.symlink(os.path.join(cli.ROOT, "kernelspecs"), os.path.join(jupyter, "kernels"))
    res = sidebyside.on_own_daemon(a.binary, lambda d: measure(d, max(a.n, 2), a.warmup),
                                   env={**os.environ, "JUPYTER_PATH": jupyter})
    sidebyside.finish(a, "bash", res, ("daemon_s", "process_s"), tables(res), figures(res), env)

if __name__ == "__main__":
    main()
