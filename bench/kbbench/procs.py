"""Processes the bench starts and what /proc says about them.

Every process started through spawn() is registered in STARTED and stopped
by stop_all() at the end (SIGTERM, then SIGKILL of its process group after
a bound); raw.py's kernels and peers.py's jupyter_client kernels keep
registries of their own, which stop_all() empties too.

Not for: the machine as a whole (machine.py), HTTP (httpclient.py).
"""

import os
import signal
import subprocess
import time
from typing import Any

STARTED: list["subprocess.Popen[bytes]"] = []  # every Popen spawn() started


def spawn(argv: list[str], **kw: Any) -> "subprocess.Popen[bytes]":
    """Popen in a session of its own, stdin closed, registered in STARTED."""
    proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
    STARTED.append(proc)
    return proc


def stop(proc: "subprocess.Popen[bytes]", timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL of its process group after timeout seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    if proc in STARTED:
        STARTED.remove(proc)


def stop_all() -> None:
    """Stop every kernel and process this bench started and has not stopped."""
    from . import peers, raw

    for k in list(raw.LIVE):
        k.shutdown(timeout=2.0)
    for jc in list(peers.LIVE_JC):
        jc.shutdown(now=True)
    for proc in list(STARTED):
        stop(proc)


def pid_gone(pid: int, timeout: float = 15.0) -> bool:
    """Wait until /proc/<pid> is gone (exited and reaped); True if it went."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    time.sleep(0.01)
                    continue
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False


def _cmdline(pid: str) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def _zombie(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def pids_naming(prefix: str, zombies: bool = True) -> list[int]:
    """Pids of the processes (not this one) whose command line has an
    argument starting with prefix (a file under a dir of ours); zombies
    left out unless `zombies`."""
    pre = prefix.encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        argv = _cmdline(entry)
        if argv and any(a.startswith(pre) for a in argv) and (zombies or not _zombie(entry)):
            pids.append(int(entry))
    return pids


def count_with(marker: bytes) -> int:
    """Live (not zombie) processes whose command line contains marker."""
    found = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = _cmdline(entry)
            if argv and marker in b"\0".join(argv) and not _zombie(entry):
                found += 1
    return found


def kill_groups(pids: list[int]) -> None:
    """SIGKILL each pid's process group and the pid itself."""
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, Threads from /proc/<pid>/status (KiB / count)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(val.split()[0])
    return out


def smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def rss_by_mapping(pid: int, top: int = 8) -> list[tuple[str, int]]:
    """Resident KiB per mapped file (or [heap], [anon], [stack]) from smaps."""
    totals: dict[str, int] = {}
    name = "[anon]"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                fields = line.split()
                name = fields[5] if len(fields) > 5 else "[anon]"
                name = os.path.basename(name) if name.startswith("/") else name
            elif first == "Rss:":
                totals[name] = totals.get(name, 0) + int(line.split()[1])
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads, the exited ones
    too (utime + stime of /proc/<pid>/stat; clock ticks, so 10 ms steps)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def schedstat(pid: int) -> dict[str, Any]:
    """CPU time (ns) and run slices of the live threads of a process, by thread
    name, and each thread's run slices by its id (`slices_by_tid`)."""
    cpu = slices = 0
    threads: dict[str, int] = {}
    slices_by_tid: dict[int, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, _, n = (int(x) for x in f.read().split())
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu += run_ns
        slices += n
        slices_by_tid[int(tid)] = n
        name = "engine+main" if name == "kernelbridge" else name
        threads[name] = threads.get(name, 0) + run_ns
    return {"cpu_ns": cpu, "slices": slices, "threads": threads, "slices_by_tid": slices_by_tid}


def slices_between(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Run slices between two schedstat() readings, thread by thread: of the
    threads live at the second (one born in between counts from 0); one
    gone by then is left out, its slices unknown (a difference of the
    totals would go negative when a busy thread ends)."""
    known = before["slices_by_tid"]
    return sum(n - known.get(tid, 0) for tid, n in after["slices_by_tid"].items())


def per_request(before: dict[str, Any], after: dict[str, Any], n: int) -> dict[str, Any]:
    """The daemon's CPU (µs), run slices and CPU by thread (µs) per request
    between two schedstat() readings n requests apart."""
    return {
        "cpu_us": (after["cpu_ns"] - before["cpu_ns"]) / n / 1e3,
        "slices": slices_between(before, after) / n,
        "by_thread_us": {t: (after["threads"].get(t, 0) - before["threads"].get(t, 0)) / n / 1e3
                         for t in after["threads"]},
    }


def threads_text(by_thread_us: dict[str, float]) -> str:
    """`name µs, ...` by decreasing CPU, threads under 1 µs left out."""
    order = sorted(by_thread_us.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {v:,.0f}" for name, v in order if v >= 1)


def request_log_times(text: str) -> dict[str, list[float]]:
    """Seconds per request from the daemon's request log, by 'METHOD /path'."""
    out: dict[str, list[float]] = {"POST /run": [], "GET /health": []}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1].endswith("ms"):
            key = f"{parts[1]} {parts[2]}"
            if key in out:
                try:
                    out[key].append(float(parts[-1][:-2]) / 1e3)
                except ValueError:
                    pass
    return out


def listening_ports(pid: int) -> list[int]:
    """TCP ports a process listens on (from /proc/net/tcp and its fds)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        ports.append(int(fields[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return ports


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
