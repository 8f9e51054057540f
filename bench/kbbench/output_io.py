"""The output axis's instruments: the daemon's RSS sampled around a run, a
guard on the bench's own memory, and the clients of a big run (POST /run
read whole, the raw client draining iopub, an SSE reader that stalls).

Not for: the parts and their rounds (output_axis.py), tables (output_report.py).
"""

import http.client
import json
import os
import signal
import socket
import threading
import time
from typing import Any, Callable

from . import procs, raw
from .daemon import Daemon
from .httpclient import Http

SAMPLE_EVERY_S = 0.05
STALL_S, RCVBUF = 10.0, 64 * 1024


def rss_kib(pid: int) -> int:
    return procs.proc_status(pid)["VmRSS"]


class RssSampler:
    """VmRSS and VmHWM of one process every 50 ms in a thread, its VmHWM reset
    first so that VmHWM at the end is the peak of this window."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int, int]] = []  # (perf_counter, VmRSS, VmHWM) KiB
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RssSampler":
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        st = procs.proc_status(self.pid)
        self.reset_ok = st["VmHWM"] <= st["VmRSS"] + 1024  # else: counts from the start
        self.before_kib = st["VmRSS"]
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                st = procs.proc_status(self.pid)
            except (OSError, KeyError):
                return
            self.samples.append((time.perf_counter(), st["VmRSS"], st["VmHWM"]))
            self._stop.wait(SAMPLE_EVERY_S)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        st = procs.proc_status(self.pid)
        self.after_kib = st["VmRSS"]
        sampled = max((s[1] for s in self.samples), default=st["VmRSS"])
        self.peak_kib = max(st["VmHWM"], sampled) if self.reset_ok else sampled

    def max_between(self, t0: float, t1: float) -> int:
        return max((s[1] for s in self.samples if t0 <= s[0] <= t1), default=0)

    def figures(self, idle_kib: int) -> dict[str, Any]:
        return {"idle_kib": idle_kib, "before_kib": self.before_kib, "peak_kib": self.peak_kib,
                "peak_minus_idle_kib": self.peak_kib - idle_kib, "after_kib": self.after_kib,
                "hwm_reset": self.reset_ok, "samples": len(self.samples)}


class MemoryGuard:
    """The bench's memory bounded on purpose: every 0.25 s the RSS of this
    process and of every process watched (daemons, kernels) is added up; over
    the bound, the watched ones are killed (SIGKILL to their process groups)
    and `tripped` says so, so that the run in flight fails."""

    def __init__(self, bound_kib: int, log: Callable[[str], None]) -> None:
        self.bound_kib, self.log = bound_kib, log
        self.pids: set[int] = set()
        self.peak_kib = 0
        self.tripped: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, *pids: int | None) -> None:
        self.pids.update(p for p in pids if p)

    def unwatch(self, *pids: int | None) -> None:
        self.pids.difference_update(pids)

    def start(self) -> "MemoryGuard":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def check(self) -> None:
        if self.tripped:
            raise RuntimeError(self.tripped)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            total = 0
            for pid in [os.getpid(), *self.pids]:
                try:
                    total += rss_kib(pid)
                except (OSError, KeyError):
                    pass
            self.peak_kib = max(self.peak_kib, total)
            if total > self.bound_kib and not self.tripped:
                self.tripped = (f"memory bound: {total // 1024} MiB > {self.bound_kib // 1024} MiB; "
                                f"daemon and kernels killed")
                self.log(self.tripped)
                for pid in list(self.pids):
                    for kill in (os.killpg, os.kill):
                        try:
                            kill(pid, signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass


def purge(d: Daemon) -> list[str]:
    """DELETE every process record GET /processes lists; their ids."""
    ids = [p["process_id"] for p in d.http.json("GET", "/processes")["processes"]]
    for i in ids:
        d.http.json("DELETE", f"/processes/{i}", expect=(204, 404))
    return ids


def written(d: Daemon, timeout: float = 60.0) -> float:
    """Until the daemon's state writer has nothing held or queued (GET
    /health's state: a record's 100 MiB of frames deleted, the WAL
    checkpointed), so that no run of the next contender shares the CPUs
    with it; the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        state = d.http.json("GET", "/health").get("state") or {}
        if state.get("held") is False and state.get("behind") == 0:
            return time.perf_counter() - t0
        time.sleep(0.02)
    raise RuntimeError(f"the state writer still busy after {timeout} s: {state}")


def bridge_run(h: Http, ctx_id: str, src: str, daemon_pid: int | None = None,
               into: bytearray | None = None) -> tuple[dict[str, Any], bytes]:
    """POST /run, plain JSON, the answer read fully (not parsed: see answer()).
    With `into`, the body is read into that buffer, made once and used again
    by every run (what a client that keeps its answers in one place does);
    without, into new memory of its own, as `read()` gives it (whose first
    touch of each page is the client's cost, not the daemon's: PERFORMANCE.md,
    "What the rate's client pays")."""
    body = json.dumps({"code": src, "context_id": ctx_id}).encode()
    if time.monotonic() - h.last_used > h.IDLE_REOPEN_S:
        h.conn.close()  # reconnects: the daemon may have closed it
    cpu0 = procs.process_cpu_s(daemon_pid) if daemon_pid else 0.0
    t0 = time.perf_counter()
    h.conn.request("POST", "/run", body=body, headers={"Content-Type": "application/json"})
    r = h.conn.getresponse()
    t_headers = time.perf_counter() - t0
    if into is None:
        data = r.read()
        dt = time.perf_counter() - t0
    else:
        view, n = memoryview(into), 0
        while n < len(into) and (k := r.readinto(view[n:])) > 0:
            n += k
        dt = time.perf_counter() - t0
        if not r.isclosed():
            raise RuntimeError(f"an answer over the client's {len(into):,} bytes")
        data = bytes(view[:n])
    h.last_used = time.monotonic()
    out = {"s": dt, "headers_s": t_headers, "http_status": r.status, "body_bytes": len(data)}
    if daemon_pid:
        out["daemon_cpu_s"] = procs.process_cpu_s(daemon_pid) - cpu0
    return out, data


def answer(out: dict[str, Any], data: bytes) -> dict[str, Any]:
    """Parse a POST /run answer into out: stdout length, truncated, reason."""
    t0 = time.perf_counter()
    try:
        res = json.loads(data)
        stdout = res["logs"]["stdout"]
        out["stdout_bytes"] = len(stdout) if isinstance(stdout, str) else sum(map(len, stdout))
        out["truncated"] = res.get("truncated")
        out["reason"] = res["process"]["reason"]
        out["error_name"] = (res.get("error") or {}).get("name")
        out["process_id"] = res["process"]["process_id"]
    except (ValueError, KeyError, TypeError):
        out["error"] = f"HTTP {out['http_status']}: {data[:300]!r}"
    out["parse_s"] = time.perf_counter() - t0
    return out


def raw_drain(c: raw.RawClient, src: str, timeout: float = 600.0,
              into: bytearray | None = None) -> dict[str, Any]:
    """Run src on the raw client; until execute_reply and iopub idle, every
    message verified. Without `into`, each stream message is parsed as it
    comes and its text counted; with it, each stream message's content is
    kept in that buffer (made once, used again by every run) and parsed
    after the wall, as bridge_run's answer is."""
    t0 = time.perf_counter()
    msg_id = c.send(c.shell, "execute_request", {
        "code": src, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True})
    replied = idle = False
    status, nbytes, msgs, kept, at = None, 0, 0, [], 0
    while not (replied and idle):
        left = t0 + timeout - time.perf_counter()
        if left <= 0:
            raise raw.KernelTimeout(f"raw run: no reply/idle after {timeout} s")
        for sock, _ in c.poller.poll(int(left * 1000)):
            m = c.recv(sock)
            if m is None or m[1] != msg_id:
                continue
            if sock is c.shell and m[0] == "execute_reply":
                replied, status = True, json.loads(m[2])["status"]
            elif m[0] == "status" and json.loads(m[2])["execution_state"] == "idle":
                idle = True
            elif m[0] == "stream":
                msgs += 1
                if into is None:
                    nbytes += len(json.loads(m[2])["text"])
                elif at + len(m[2]) > len(into):
                    raise RuntimeError(f"output over the client's {len(into):,} bytes")
                else:
                    into[at:at + len(m[2])] = m[2]
                    kept.append((at, len(m[2])))
                    at += len(m[2])
    out = {"s": time.perf_counter() - t0, "messages": msgs, "status": status}
    t1 = time.perf_counter()
    view = memoryview(into) if into is not None else None
    for a, n in kept:
        nbytes += len(json.loads(bytes(view[a:a + n]))["text"])
    out.update(stdout_bytes=nbytes, parse_s=time.perf_counter() - t1)
    return out


class SseReader:
    """Events of an SSE body fed in pieces: counts by type, stdout bytes, the result."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.scan = 0
        self.events: dict[str, int] = {}
        self.stdout_bytes = 0
        self.last: str | None = None
        self.result: dict[str, Any] | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        while (i := self.buf.find(b"\n\n", self.scan)) >= 0:
            block = bytes(self.buf[:i])
            del self.buf[:i + 2]
            self.scan = 0
            self._event(block)
        self.scan = max(0, len(self.buf) - 1)

    def _event(self, block: bytes) -> None:
        kind, data = "message", []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                kind = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        if not data:
            return  # a comment (keep-alive)
        self.events[kind] = self.events.get(kind, 0) + 1
        self.last = kind
        payload = b"\n".join(data)
        if kind == "stdout":
            self.stdout_bytes += len(json.loads(payload)["text"])
        elif kind == "result":
            self.result = json.loads(payload)


def sse_stalled(d: Daemon, ctx_id: str, src: str, sampler: RssSampler) -> dict[str, Any]:
    """An SSE POST /run on a socket with a small receive buffer: the headers,
    then nothing read for STALL_S, then everything to the end."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.settimeout(120)
    sock.connect(("127.0.0.1", d.port))
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
    conn.sock = sock
    out: dict[str, Any] = {"rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)}
    ev = SseReader()
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/run", body=json.dumps({"code": src, "context_id": ctx_id}).encode(),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = conn.getresponse()
        out["http_status"], out["content_type"] = r.status, r.getheader("Content-Type")
        t_headers = time.perf_counter()
        time.sleep(STALL_S)
        t_resume = time.perf_counter()
        out["stall_peak_kib"] = sampler.max_between(t_headers, t_resume)
        while chunk := r.read1(1 << 20):
            ev.feed(chunk)
        out["end"] = "end of stream"
    except (OSError, http.client.HTTPException) as e:
        out["end"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    out["s"] = time.perf_counter() - t0
    out["events"], out["last_event"] = ev.events, ev.last
    out["stdout_event_bytes"] = ev.stdout_bytes
    out["result_arrived"] = ev.last == "result" and ev.result is not None
    if ev.result:
        stdout = ev.result["logs"]["stdout"]
        out["result_stdout_bytes"] = len(stdout) if isinstance(stdout, str) else sum(map(len, stdout))
        out["truncated"] = ev.result.get("truncated")
        out["reason"] = ev.result["process"]["reason"]
    return out
