"""The machine a bench runs on: how busy its CPUs are, what memory is left,
and what it is (CPU, kernel, packages, the commit measured).

Not for the processes measured: their CPU time and memory are read in
peers.py.
"""

import os
import platform
import subprocess
import sys
import time


def _cpu_totals() -> tuple[int, int]:
    """(all jiffies, idle + iowait jiffies) of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def cpu_idle(window: float = 2.0) -> float:
    """Fraction of all CPUs' time idle over `window` seconds."""
    t0, i0 = _cpu_totals()
    time.sleep(window)
    t1, i1 = _cpu_totals()
    return (i1 - i0) / max(1, t1 - t0)


class IdleMeter:
    """The machine's idle fraction between start() and stop(), for a window
    in which something else is being measured."""

    def __init__(self) -> None:
        self._start = _cpu_totals()

    def stop(self) -> float:
        t1, i1 = _cpu_totals()
        t0, i0 = self._start
        return (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit_s: float, want: float = 0.9, window: float = 2.0,
               retry_window: float | None = None) -> float:
    """Wait (at most limit_s past a first window of `window` s) for the
    machine to be at least `want` idle over one window (`retry_window` s
    after the first); returns the last idle fraction seen."""
    deadline = time.perf_counter() + limit_s
    idle = cpu_idle(window)
    again = retry_window or window
    while idle < want and time.perf_counter() < deadline:
        print(f"machine {100 * (1 - idle):.0f}% busy; waiting for it to settle",
              file=sys.stderr, flush=True)
        idle = cpu_idle(again)
    return idle


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


PACKAGES = ("python3-ipykernel", "xpython", "python3-jupyter-client", "python3-zmq", "libzmq5",
            "python3-jupyter-server", "python3-websocket", "python3-tornado", "libmicrohttpd12",
            "libczmq4", "libjansson4", "libssl3")


def environment(binary: str, root: str, packages: tuple[str, ...] = PACKAGES) -> dict[str, object]:
    """What was measured, on what: CPU, memory, Linux, Python, the checkout's
    commit (`git describe --dirty`) and the Debian packages' versions."""
    def dpkg(pkg: str) -> str:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                           text=True)
        return r.stdout.strip() or "-"

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem_kib = int(line.split()[1])
    commit = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty", "--abbrev=7"],
                            capture_output=True, text=True).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "commit": commit,
        "binary": binary,
        "packages": {p: dpkg(p) for p in packages},
    }


def private_environment(tmp, drop_kb=True):
    """Point the kernels' per-user state (IPython, Jupyter runtime,
    matplotlib) into the private directory tmp, and (drop_kb) forget the
    daemon's KB_* settings so that only the flags a benchmark gives count."""
    for var, sub in (("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("MPLCONFIGDIR", "mpl")):
        os.environ[var] = os.path.join(tmp, sub)
        os.makedirs(os.environ[var], mode=0o700)
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    if drop_kb:
        for k in [k for k in os.environ if k.startswith("KB_")]:
            del os.environ[k]


def smaps_mib(pid: int) -> tuple[float, float]:
    """(USS, PSS) in MiB of a process, from /proc/<pid>/smaps_rollup."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.endswith(" kB\n"):
                name, value = line.split()[:2]
                fields[name.rstrip(":")] = int(value)
    return ((fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) / 1024,
            fields.get("Pss", 0) / 1024)
