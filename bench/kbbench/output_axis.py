"""The output axis: what runs that print a lot cost the daemon.

Five parts, each on a daemon of its own (`--pool python=0`, loopback,
ephemeral port, private state dir; one daemon alive at a time, so that one
part's leftovers do not count in another's), each for `rounds` rounds:

  rate        100 MiB printed by python3 (ipykernel) through `POST /run`
              (plain JSON, read fully; `--max-output 200M` so that all of it
              comes back) versus the raw ZeroMQ client (raw.py) draining the
              same output from a kernel of the same kernelspec; one message
              (one write) and chunked (a flush every 1 MiB). Each client
              keeps the output in a buffer used again by every round and
              parses it after the wall; beside them, both clients as they
              were measured before (the raw client parsing every message as
              it comes, the answer read into new memory). Each round runs
              the eight in a shuffled order
  single      one 200 MiB run at the default 64 MiB cap, chunked and one
              message, in a shuffled order: the daemon's peak RSS
  concurrent  four 200 MiB chunked runs at once on four contexts, each on a
              connection of its own (`--max-output-memory 256M` when the
              daemon has it); then `purge`: every record deleted and the RSS
              sampled every 0.25 s for 5 s
  concurrent8 the same with eight runs on eight contexts
  stall       an SSE client (`Accept: text/event-stream`, a 64 KiB receive
              buffer) of a 200 MiB chunked run that reads the headers, reads
              nothing for 10 s, then reads to the end

The daemon's RSS is sampled every 50 ms (VmRSS, VmHWM of /proc/PID/status)
around each run, VmHWM reset first (`5` to /proc/PID/clear_refs). "idle" is
the daemon's VmRSS with its contexts started, one `1+1` run on each and its
record deleted. A MemoryGuard keeps the whole bench under a bound.

Not for: the instruments (output_io.py), tables and figures (output_report.py),
the command (bench/output.py).
"""

import gc
import os
import random
import subprocess
import threading
import time
from typing import Any, Callable

from . import raw, report
from .daemon import Daemon
from .httpclient import Http
from .output_io import (MemoryGuard, RssSampler, STALL_S, answer, bridge_run, purge, raw_drain,
                        rss_kib, sse_stalled, written)

MIB = 1024 * 1024
CAP = 64 * MIB  # the daemon's default --max-output
BUDGET_MIB = 256  # --max-output-memory for the concurrent runs
RATE_MIB, BIG_MIB, CONCURRENT, CONCURRENT8 = 100, 200, 4, 8
SHAPES = ("one-message", "chunked")
# The rate's contenders: both clients keeping their output in a buffer used
# again by every round, parsed after the wall (the target's pair); then both
# as they were measured before (the raw client parsing each message as it
# comes, the answer read into new memory each round), for comparison.
RATE_WHO = ("kernelbridge", "raw")
RATE_BEFORE = ("kernelbridge-fresh", "raw-parsing")
RATE_KEEP_MIB = 128  # each client's buffer: 100 MiB of text and its JSON
PURGE_WINDOW_S, PURGE_EVERY_S = 5.0, 0.25


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


class Setup:
    """A daemon with `n` python3 contexts, each warmed with `1+1`, records purged."""

    def __init__(self, binary: str, workdir: str, extra: tuple[str, ...], n: int,
                 guard: MemoryGuard) -> None:
        self.guard = guard
        self.daemon = Daemon(binary, workdir, ("--pool", "python=0", *extra))
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
            self.idle_kib = rss_kib(self.daemon.pid)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.daemon.stop()
        self.daemon.kill_processes_left()
        self.guard.unwatch(self.daemon.pid, *self.kernel_pids)


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

    def _big(self, s: Setup, i: int, src: str, into: bytearray | None = None) -> dict[str, Any]:
        """One run over the kept-alive connection; answer parsed, record deleted."""
        gc.collect()
        out, data = bridge_run(s.daemon.http, s.ctxs[i], src, s.daemon.pid, into)
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
            # Each client keeps its output in one buffer of its own, used by
            # every round (RATE_WHO), or reads it as before (RATE_BEFORE).
            keep = {who: bytearray(RATE_KEEP_MIB * MIB) for who in RATE_WHO}
            runs: dict[str, list[dict[str, Any]]] = {f"{sh}/{w}": [] for sh in SHAPES
                                                     for w in RATE_WHO + RATE_BEFORE}
            for i in range(self.rounds):
                order = list(runs)
                self.rng.shuffle(order)
                for key in order:
                    shape, who = key.split("/")
                    self.log(f"output: rate round {i + 1}/{self.rounds}: {shape}, {who}")
                    src = code(RATE_MIB, shape)
                    gc.collect()
                    settle_s = written(s.daemon)
                    if who.startswith("raw"):
                        runs[key].append(raw_drain(rk.client, src, into=keep.get(who)))
                    else:
                        runs[key].append(self._big(s, 0, src, keep.get(who)))
                    runs[key][-1]["writer_settle_s"] = settle_s
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
                    out["after_purge_kib"] = rss_kib(s.daemon.pid)
                    runs[shape].append(out)
            return {"idle_kib": s.idle_kib, "cap": CAP, "runs": runs}
        finally:
            s.close()

    def concurrent8(self) -> dict[str, Any]:
        return self.concurrent(CONCURRENT8)

    def concurrent(self, n: int = CONCURRENT) -> dict[str, Any]:
        extra = ("--max-output-memory", f"{BUDGET_MIB}M") if self.output_memory else ()
        s = self._setup(f"concurrent{n}", extra, n)
        conns = [Http(s.daemon.port) for _ in range(n)]
        try:
            rounds = []
            for i in range(self.rounds):
                self.log(f"output: concurrent round {i + 1}/{self.rounds}: "
                         f"{n} x {BIG_MIB} MiB at once")
                gc.collect()
                got: list[Any] = [None] * n
                barrier = threading.Barrier(n)

                def worker(w: int) -> None:
                    try:
                        barrier.wait(60)
                        got[w] = bridge_run(conns[w], s.ctxs[w], code(BIG_MIB, "chunked"))
                    except Exception as e:  # reported, not raised: the others go on
                        got[w] = e

                threads = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
                with RssSampler(s.daemon.pid) as smp:
                    t0 = time.perf_counter()
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(600)
                    wall = time.perf_counter() - t0
                runs = []
                for w in range(n):  # one answer parsed at a time: bounded memory
                    g, got[w] = got[w], None
                    runs.append({"error": repr(g)} if not isinstance(g, tuple) else answer(*g))
                    del g
                self.guard.check()
                r = dict(smp.figures(s.idle_kib), wall_s=wall, runs=runs)
                if n == CONCURRENT:  # the purge is measured once, after the four
                    r["purge"] = self._purge(s)
                rounds.append(r)
            return {"idle_kib": s.idle_kib, "max_output_memory": BUDGET_MIB if extra else None,
                    "n": n, "rounds": rounds}
        finally:
            for h in conns:
                h.close()
            s.close()

    def _purge(self, s: Setup) -> dict[str, Any]:
        """Every record deleted, then VmRSS every 0.25 s for 5 s."""
        pid = s.daemon.pid
        before = rss_kib(pid)
        t0 = time.perf_counter()
        ids = purge(s.daemon)
        t1 = time.perf_counter()
        timeline = []
        k = 0
        while (t := k * PURGE_EVERY_S) <= PURGE_WINDOW_S + 1e-9:
            time.sleep(max(0.0, t1 + t - time.perf_counter()))
            timeline.append((t, rss_kib(pid)))
            k += 1
        slack_kib = report.bound("output", "purge.after_5s_minus_idle_mib") * 1024
        within = next((t for t, v in timeline if v <= s.idle_kib + slack_kib), None)
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
            parts: tuple[str, ...] = ("rate", "single", "concurrent", "concurrent8", "stall"),
            ) -> dict[str, Any]:
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
