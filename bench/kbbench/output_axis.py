"""The output axis: what runs that print a lot cost the daemon.

Five parts, each on a daemon of its own (`--pool python=0`, loopback,
ephemeral port, private state dir; one daemon alive at a time, so that one
part's leftovers do not count in another's), each for `rounds` rounds:

  rate        100 MiB printed by python3 (ipykernel) through `POST /run`
              (plain JSON, read fully; `--max-output 200M` so that all of it
              comes back) versus the raw ZeroMQ client (raw.py) draining the
              same output from a kernel of the same kernelspec; one message
              (one write) and chunked (a flush every 1 MiB); each round runs
              the four in a shuffled order
  single      one 200 MiB run at the default 64 MiB cap, chunked and one
              message, in a shuffled order: the daemon's peak RSS
  concurrent  four 200 MiB chunked runs at once on four contexts, each on a
              connection of its own (`--max-output-memory 256M` when the
              daemon has it); then `purge`: every record deleted and the RSS
              sampled every 0.25 s for 5 s
  stall       an SSE client (`Accept: text/event-stream`, a 64 KiB receive
              buffer) of a 200 MiB chunked run that reads the headers, reads
              nothing for 10 s, then reads to the end

The daemon's RSS is sampled every 50 ms (VmRSS, VmHWM of /proc/PID/status)
around each run, VmHWM reset first (`5` to /proc/PID/clear_refs). "idle" is
the daemon's VmRSS with its contexts started, one `1+1` run on each and its
record deleted. A MemoryGuard keeps the whole bench under a bound.

Not for: verdicts and tables (output_report.py), the command (bench/output.py).
"""

import gc
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Callable

from . import peers, raw

MIB = 1024 * 1024
CAP = 64 * MIB  # the daemon's default --max-output
BUDGET_MIB = 256  # --max-output-memory for the concurrent runs
RATE_MIB, BIG_MIB, CONCURRENT = 100, 200, 4
SHAPES = ("one-message", "chunked")
STALL_S, RCVBUF = 10.0, 64 * 1024
PURGE_WINDOW_S, PURGE_EVERY_S, PURGE_SLACK_KIB = 5.0, 0.25, 16 * 1024
SAMPLE_EVERY_S = 0.05


def code(mib: int, shape: str) -> str:
    """Python printing `mib` MiB of 1 KiB lines: one write of all of them (one
    stream message: ipykernel sends a write's text whole), or a write and a
    flush of 1 MiB at a time (one message per MiB). Not a write per line and
    no flush: ipykernel 6.17 then sends its buffer whenever its IO thread gets
    the GIL after its 0.2 s flush interval, 2 to 7 messages for 100 MiB here."""
    if shape == "one-message":
        return f"import sys\nsys.stdout.write(('x' * 1023 + '\\n') * {mib * 1024})\n"
    return (f"import sys\ns = ('x' * 1023 + '\\n') * 1024\nfor i in range({mib}):\n"
            "    sys.stdout.write(s)\n    sys.stdout.flush()\n")


def supports_output_memory(binary: str) -> bool:
    r = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30)
    return "--max-output-memory" in r.stdout + r.stderr


def _rss(pid: int) -> int:
    return peers.proc_status(pid)["VmRSS"]


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
        st = peers.proc_status(self.pid)
        self.reset_ok = st["VmHWM"] <= st["VmRSS"] + 1024  # else: counts from the start
        self.before_kib = st["VmRSS"]
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                st = peers.proc_status(self.pid)
            except (OSError, KeyError):
                return
            self.samples.append((time.perf_counter(), st["VmRSS"], st["VmHWM"]))
            self._stop.wait(SAMPLE_EVERY_S)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        st = peers.proc_status(self.pid)
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
                    total += _rss(pid)
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


class Setup:
    """A daemon with `n` python3 contexts, each warmed with `1+1`, records purged."""

    def __init__(self, binary: str, workdir: str, extra: tuple[str, ...], n: int,
                 guard: MemoryGuard) -> None:
        self.guard = guard
        self.daemon = peers.Daemon(binary, workdir, ("--pool", "python=0", *extra))
        guard.watch(self.daemon.pid)
        self.ctxs: list[str] = []
        self.kernel_pids: list[int | None] = []
        try:
            for _ in range(n):
                ctx = self.daemon.create_context(kernel_name="python3")[0]
                guard.watch(ctx.get("pid"))
                self.kernel_pids.append(ctx.get("pid"))
                self.ctxs.append(ctx["context_id"])
                self.daemon.http.json("POST", "/run", {"code": "1+1", "context_id": ctx["context_id"]})
            purge(self.daemon)
            time.sleep(0.5)
            self.idle_kib = _rss(self.daemon.pid)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.daemon.stop()
        self.daemon.kill_processes_left()
        self.guard.unwatch(self.daemon.pid, *self.kernel_pids)


def purge(d: peers.Daemon) -> list[str]:
    """DELETE every process record GET /processes lists; their ids."""
    ids = [p["process_id"] for p in d.http.json("GET", "/processes")["processes"]]
    for i in ids:
        d.http.json("DELETE", f"/processes/{i}", expect=(204, 404))
    return ids


def bridge_run(h: peers.Http, ctx_id: str, src: str,
               daemon_pid: int | None = None) -> tuple[dict[str, Any], bytes]:
    """POST /run, plain JSON, the answer read fully (not parsed: see answer())."""
    body = json.dumps({"code": src, "context_id": ctx_id}).encode()
    if time.monotonic() - h.last_used > h.IDLE_REOPEN_S:
        h.conn.close()  # reconnects: the daemon may have closed it
    cpu0 = peers.process_cpu_s(daemon_pid) if daemon_pid else 0.0
    t0 = time.perf_counter()
    h.conn.request("POST", "/run", body=body, headers={"Content-Type": "application/json"})
    r = h.conn.getresponse()
    t_headers = time.perf_counter() - t0
    data = r.read()
    dt = time.perf_counter() - t0
    h.last_used = time.monotonic()
    out = {"s": dt, "headers_s": t_headers, "http_status": r.status, "body_bytes": len(data)}
    if daemon_pid:
        out["daemon_cpu_s"] = peers.process_cpu_s(daemon_pid) - cpu0
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
        out["process_id"] = res["process"]["process_id"]
    except (ValueError, KeyError, TypeError):
        out["error"] = f"HTTP {out['http_status']}: {data[:300]!r}"
    out["parse_s"] = time.perf_counter() - t0
    return out


def raw_drain(c: raw.RawClient, src: str, timeout: float = 600.0) -> dict[str, Any]:
    """Run src on the raw client; until execute_reply and iopub idle, every
    stream message parsed, its text counted."""
    t0 = time.perf_counter()
    msg_id = c.send(c.shell, "execute_request", {
        "code": src, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True})
    replied = idle = False
    status, nbytes, msgs = None, 0, 0
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
                nbytes += len(json.loads(m[2])["text"])
                msgs += 1
    return {"s": time.perf_counter() - t0, "stdout_bytes": nbytes, "messages": msgs, "status": status}


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


def sse_stalled(d: peers.Daemon, ctx_id: str, src: str, sampler: RssSampler) -> dict[str, Any]:
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


# ---- the parts -----------------------------------------------------------------


class OutputAxis:
    def __init__(self, binary: str, workdir: str, rounds: int, seed: int,
                 guard: MemoryGuard, log: Callable[[str], None]) -> None:
        self.binary, self.workdir, self.rounds = binary, workdir, rounds
        self.rng = random.Random(seed)
        self.guard, self.log = guard, log
        self.output_memory = supports_output_memory(binary)

    def _setup(self, name: str, extra: tuple[str, ...] = (), n: int = 1) -> Setup:
        self.log(f"output: {name}: starting a daemon and {n} context(s)")
        return Setup(self.binary, os.path.join(self.workdir, name), extra, n, self.guard)

    def _big(self, s: Setup, i: int, src: str) -> dict[str, Any]:
        """One run over the kept-alive connection; answer parsed, record deleted."""
        gc.collect()
        out, data = bridge_run(s.daemon.http, s.ctxs[i], src, s.daemon.pid)
        answer(out, data)
        del data
        self.guard.check()
        if "process_id" in out:
            s.daemon.http.json("DELETE", f"/processes/{out['process_id']}", expect=(204,))
        return out

    def rate(self) -> dict[str, Any]:
        s = self._setup("rate", ("--max-output", "200M"))
        rk = None
        try:
            rk = raw.RawKernel("python3", os.path.join(self.workdir, "rate-raw"), "ipc").start()
            assert rk.proc is not None and rk.client is not None
            self.guard.watch(rk.proc.pid)
            raw_drain(rk.client, "1+1")
            runs: dict[str, list[dict[str, Any]]] = {f"{sh}/{w}": [] for sh in SHAPES
                                                     for w in ("kernelbridge", "raw")}
            for i in range(self.rounds):
                order = list(runs)
                self.rng.shuffle(order)
                for key in order:
                    shape, who = key.split("/")
                    self.log(f"output: rate round {i + 1}/{self.rounds}: {shape}, {who}")
                    src = code(RATE_MIB, shape)
                    if who == "raw":
                        gc.collect()
                        runs[key].append(raw_drain(rk.client, src))
                    else:
                        runs[key].append(self._big(s, 0, src))
            return {"mib": RATE_MIB, "runs": runs}
        finally:
            if rk is not None:
                self.guard.unwatch(rk.proc.pid if rk.proc else None)
                rk.shutdown()
            s.close()

    def single(self) -> dict[str, Any]:
        s = self._setup("single")
        try:
            runs: dict[str, list[dict[str, Any]]] = {sh: [] for sh in SHAPES}
            for i in range(self.rounds):
                order = list(SHAPES)
                self.rng.shuffle(order)
                for shape in order:
                    self.log(f"output: single round {i + 1}/{self.rounds}: {BIG_MIB} MiB, {shape}")
                    gc.collect()
                    with RssSampler(s.daemon.pid) as smp:
                        out, data = bridge_run(s.daemon.http, s.ctxs[0], code(BIG_MIB, shape),
                                               s.daemon.pid)
                    answer(out, data)
                    del data
                    self.guard.check()
                    out.update(smp.figures(s.idle_kib))
                    purge(s.daemon)
                    time.sleep(0.2)
                    out["after_purge_kib"] = _rss(s.daemon.pid)
                    runs[shape].append(out)
            return {"idle_kib": s.idle_kib, "cap": CAP, "runs": runs}
        finally:
            s.close()

    def concurrent(self) -> dict[str, Any]:
        extra = ("--max-output-memory", f"{BUDGET_MIB}M") if self.output_memory else ()
        s = self._setup("concurrent", extra, CONCURRENT)
        conns = [peers.Http(s.daemon.port) for _ in range(CONCURRENT)]
        try:
            rounds = []
            for i in range(self.rounds):
                self.log(f"output: concurrent round {i + 1}/{self.rounds}: "
                         f"{CONCURRENT} x {BIG_MIB} MiB at once")
                gc.collect()
                got: list[Any] = [None] * CONCURRENT
                barrier = threading.Barrier(CONCURRENT)

                def worker(w: int) -> None:
                    try:
                        barrier.wait(60)
                        got[w] = bridge_run(conns[w], s.ctxs[w], code(BIG_MIB, "chunked"))
                    except Exception as e:  # reported, not raised: the others go on
                        got[w] = e

                threads = [threading.Thread(target=worker, args=(w,)) for w in range(CONCURRENT)]
                with RssSampler(s.daemon.pid) as smp:
                    t0 = time.perf_counter()
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(600)
                    wall = time.perf_counter() - t0
                runs = []
                for w in range(CONCURRENT):  # one answer parsed at a time: bounded memory
                    g, got[w] = got[w], None
                    runs.append({"error": repr(g)} if not isinstance(g, tuple) else answer(*g))
                    del g
                self.guard.check()
                r = dict(smp.figures(s.idle_kib), wall_s=wall, runs=runs)
                r["purge"] = self._purge(s)
                rounds.append(r)
            return {"idle_kib": s.idle_kib, "max_output_memory": BUDGET_MIB if extra else None,
                    "rounds": rounds}
        finally:
            for h in conns:
                h.close()
            s.close()

    def _purge(self, s: Setup) -> dict[str, Any]:
        """Every record deleted, then VmRSS every 0.25 s for 5 s."""
        pid = s.daemon.pid
        before = _rss(pid)
        t0 = time.perf_counter()
        ids = purge(s.daemon)
        t1 = time.perf_counter()
        timeline = []
        k = 0
        while (t := k * PURGE_EVERY_S) <= PURGE_WINDOW_S + 1e-9:
            time.sleep(max(0.0, t1 + t - time.perf_counter()))
            timeline.append((t, _rss(pid)))
            k += 1
        within = next((t for t, v in timeline if v <= s.idle_kib + PURGE_SLACK_KIB), None)
        return {"before_kib": before, "records": len(ids), "ids": ids, "delete_s": t1 - t0,
                "timeline": timeline,
                "at_5s_kib": timeline[-1][1], "within_slack_at_s": within}

    def stall(self) -> dict[str, Any]:
        s = self._setup("stall")
        try:
            runs = []
            for i in range(self.rounds):
                self.log(f"output: stall round {i + 1}/{self.rounds}: SSE, {BIG_MIB} MiB, "
                         f"{STALL_S:g} s without reading")
                gc.collect()
                with RssSampler(s.daemon.pid) as smp:
                    out = sse_stalled(s.daemon, s.ctxs[0], code(BIG_MIB, "chunked"), smp)
                self.guard.check()
                out.update(smp.figures(s.idle_kib))
                out["stall_peak_minus_idle_kib"] = out.get("stall_peak_kib", 0) - s.idle_kib
                purge(s.daemon)
                runs.append(out)
            return {"idle_kib": s.idle_kib, "cap": CAP, "stall_s": STALL_S, "runs": runs}
        finally:
            s.close()


def measure(binary: str, workdir: str, rounds: int = 3, seed: int = 7, bound_gib: float = 3.0,
            log: Callable[[str], None] = print,
            parts: tuple[str, ...] = ("rate", "single", "concurrent", "stall")) -> dict[str, Any]:
    """Every part in turn; a part that fails records its error and the next goes on."""
    guard = MemoryGuard(int(bound_gib * 1024 * 1024), log).start()
    axis = OutputAxis(binary, workdir, rounds, seed, guard, log)
    res: dict[str, Any] = {"rounds": rounds, "max_output_memory_supported": axis.output_memory}
    try:
        for name in parts:
            t0 = time.perf_counter()
            try:
                res[name] = getattr(axis, name)()
            except Exception as e:
                err = f"{type(e).__name__}: {e}"
                res[name] = {"error": f"{guard.tripped} ({err})" if guard.tripped else err}
                log(f"output: {name} failed: {res[name]['error']}")
            res[name]["elapsed_s"] = time.perf_counter() - t0
            if guard.tripped:
                res[name]["memory_bound_tripped"] = guard.tripped
                guard.tripped = None  # the next part starts afresh
    finally:
        guard.stop()
    res["memory_bound"] = {"bound_kib": guard.bound_kib, "peak_kib": guard.peak_kib}
    return res
