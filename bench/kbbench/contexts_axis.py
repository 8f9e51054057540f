"""The contexts axis: what one daemon costs as its idle contexts grow.

One `kernelbridge serve` on one kernelspec with one busy context, that runs
`1+1` over a kept-alive connection, and idle contexts added step by step;
at each step, once the machine is quiet again:

  idle     the daemon's CPU over a window with nothing running (no request,
           no run; its connections open and idle), and its kernels' CPU;
  latency  `1+1` through `POST /run`, round by round with the raw floor
           client (kbbench/raw.py) on a kernel of its own of the same
           kernelspec, and `GET /health` on a second kept-alive connection,
           in a shuffled order each round so that noise hits all alike;
  CPU      the daemon's CPU time per run and per /health over back-to-back
           batches: utime + stime of /proc/PID/stat (all threads, exited
           ones too), and the live threads' /proc/PID/task/*/schedstat (ns);
  memory   the daemon's VmRSS, RssAnon, RssFile, once the step's runs are
           done (so that the run records kept are the same at every step).

Not for: figures, verdicts and the report (bench/contexts.py), other
concepts (bench/README.md).
"""

import gc
import json
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import machine, procs, raw
from .calls import health_once, run_once
from .daemon import Daemon
from .httpclient import Http
from .stats import pct

CODE = "1+1"
# Finished run records the daemon keeps (`--max-processes`): few, so that the
# store is full after the first step's warm-up and weighs the same at every
# step; what is left to grow with contexts is the contexts.
RECORDS_KEPT = 10


@dataclass(frozen=True)
class Settings:
    rounds: int  # interleaved latency rounds per step
    warmup: int  # rounds before them, not counted
    cpu_batch: int  # back-to-back requests per CPU batch
    idle_window_s: float  # the idle window
    settle_s: float  # at most this long waiting for the machine to be quiet
    want_idle: float  # "quiet": this fraction of all CPUs idle over 2 s
    seed: int


@dataclass(frozen=True)
class Latency:
    n: int
    p50: float
    p90: float
    p99: float
    min: float
    mean: float

    @classmethod
    def of(cls, xs: list[float]) -> "Latency":
        return cls(len(xs), pct(xs, 50), pct(xs, 90), pct(xs, 99), min(xs), statistics.fmean(xs))


@dataclass(frozen=True)
class IdleCost:
    """The daemon doing nothing useful, over window_s seconds. The figure is
    schedstat's (ns) when the same threads lived through the window, else
    /proc/PID/stat's: its 10 ms ticks are 0.1% of a core over 10 s, a fifth
    of the 0.5% that is the target."""
    window_s: float
    daemon_cpu_s: float  # the figure: schedstat's, else /proc/PID/stat's
    daemon_cpu_stat_s: float  # utime + stime, /proc/PID/stat (10 ms ticks)
    daemon_cpu_sched_s: float  # live threads, schedstat (ns)
    same_threads: bool  # no thread of the daemon came or went in the window
    core_pct: float  # daemon_cpu_s / window_s, as % of one core
    core_pct_stat: float
    wakeups_per_s: float  # run slices (schedstat) of the daemon's threads
    kernels_cpu_s: float  # all the daemon's kernels together, /proc/PID/stat
    machine_idle: float  # fraction of all CPUs idle over the window


@dataclass(frozen=True)
class CpuPerRequest:
    """The daemon's CPU over `requests` back-to-back requests, per request."""
    requests: int
    cpu_s: float  # utime + stime, /proc/PID/stat
    cpu_sched_s: float  # live threads, schedstat
    slices: float  # run slices of the daemon's threads
    by_thread_s: dict[str, float]  # schedstat by thread name
    wall_s: float


@dataclass(frozen=True)
class Step:
    idle_contexts: int
    contexts_reported: int  # `contexts` of GET /health: the idle ones + the busy one
    created: int  # contexts created for this step
    create_p50_s: float | None  # their POST /contexts
    settle_wait_s: float
    machine_idle_settled: float | None  # None: no waiting asked for
    loadavg: str
    idle: IdleCost
    run: Latency
    floor: Latency
    health: Latency
    overhead_p50_s: float  # run p50 - floor p50
    paired_overhead_p50_s: float  # median over the rounds of (run - floor)
    machine_idle_rounds: float
    cpu_per_run: CpuPerRequest
    cpu_per_health: CpuPerRequest
    memory: dict[str, int]  # KiB (VmRSS, RssAnon, RssFile, ...) and Threads


def _floor_once(kernel: raw.RawKernel) -> float:
    dt, _, status = kernel.execute(CODE)
    if status != "ok":
        raise RuntimeError(f"floor run: {status}")
    return dt


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += procs.process_cpu_s(pid)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


class ContextsAxis:
    """One daemon on one kernelspec, grown to more and more idle contexts."""

    def __init__(self, binary: str, kernel_name: str, workdir: str, max_contexts: int,
                 log: Callable[[str], None]) -> None:
        self.binary = binary
        self.kernel_name = kernel_name
        self.workdir = workdir
        self.max_contexts = max_contexts
        self.log = log
        self.floor = raw.RawKernel(kernel_name, os.path.join(workdir, "floor"), "ipc")
        self.daemon: Daemon | None = None
        self.run_http: Http | None = None
        self.health_http: Http | None = None
        self.busy: dict[str, Any] | None = None
        self.idle: list[dict[str, Any]] = []
        self.run_body = b""

    # ---- set-up and tear-down --------------------------------------------------

    def start(self) -> None:
        """The floor's kernel, then the daemon and its busy context."""
        self.log(f"{self.kernel_name}: starting the floor's kernel and the daemon")
        self.floor.start()
        self.daemon = Daemon(
            self.binary, os.path.join(self.workdir, "daemon"),
            ("--pool", "python=0", "--max-contexts", str(self.max_contexts),
             "--max-processes", str(RECORDS_KEPT)))
        self.busy, _, _ = self.daemon.create_context(kernel_name=self.kernel_name,
                                                     context_id="busy")
        self.run_body = json.dumps({"code": CODE, "context_id": "busy"}).encode()
        self.run_http = Http(self.daemon.port)
        self.health_http = Http(self.daemon.port)

    def close(self) -> dict[str, Any]:
        """Stop the daemon (SIGTERM: it shuts its kernels down), kill whatever
        of its kernels is left, stop the floor's kernel. Safe to call twice."""
        out: dict[str, Any] = {}
        for h in (self.run_http, self.health_http):
            if h is not None:
                h.close()
        self.run_http = self.health_http = None
        if self.daemon is not None:
            daemon, self.daemon = self.daemon, None
            t0 = time.perf_counter()
            daemon.stop()
            out["daemon_stop_s"] = time.perf_counter() - t0
            out["kernels_killed_after_stop"] = len(daemon.kill_processes_left())
            out["teardown_s"] = time.perf_counter() - t0
        self.floor.shutdown()
        return out

    def kernel_pids(self) -> list[int]:
        return [int(c["pid"]) for c in [self.busy, *self.idle] if c and c.get("pid")]

    # ---- one step ----------------------------------------------------------------

    def grow_to(self, n: int) -> list[float]:
        """Create idle contexts until there are n; seconds of each POST /contexts."""
        assert self.daemon is not None, "start() first"
        times = []
        while len(self.idle) < n:
            ctx, _, dt = self.daemon.create_context(kernel_name=self.kernel_name,
                                                    context_id=f"idle-{len(self.idle) + 1}")
            self.idle.append(ctx)
            times.append(dt)
            if len(self.idle) % 10 == 0 or len(self.idle) == n:
                self.log(f"{self.kernel_name}: {len(self.idle)} idle contexts")
        return times

    def measure(self, s: Settings, created: list[float]) -> Step:
        """Everything at the current number of idle contexts."""
        assert self.daemon is not None and self.run_http is not None and self.health_http is not None
        daemon, run_http, health_http = self.daemon, self.run_http, self.health_http
        n = len(self.idle)
        t0 = time.perf_counter()
        idle_settled = machine.wait_quiet(s.settle_s, s.want_idle) if s.settle_s > 0 else None
        settle_wait_s = time.perf_counter() - t0
        load = machine.loadavg()
        contexts_reported = int(daemon.http.json("GET", "/health")["contexts"])

        contenders: dict[str, Callable[[], float]] = {
            "run": lambda: run_once(run_http, self.run_body),
            "floor": lambda: _floor_once(self.floor),
            "health": lambda: health_once(health_http),
        }
        for _ in range(s.warmup):
            for fn in contenders.values():
                fn()

        self.log(f"{self.kernel_name}, {n} idle: {s.idle_window_s:g} s idle window")
        idle = self._idle_window(daemon, s.idle_window_s)

        self.log(f"{self.kernel_name}, {n} idle: {s.rounds} interleaved rounds")
        rng = random.Random(s.seed + n)
        samples: dict[str, list[float]] = {k: [] for k in contenders}
        meter = machine.IdleMeter()
        gc.collect()
        gc.disable()
        try:
            for _ in range(s.rounds):
                order = list(contenders)
                rng.shuffle(order)
                for k in order:
                    samples[k].append(contenders[k]())
        finally:
            gc.enable()
        machine_idle_rounds = meter.stop()

        self.log(f"{self.kernel_name}, {n} idle: CPU batches of {s.cpu_batch}")
        cpu_run = self._cpu_batch(daemon, contenders["run"], s.cpu_batch)
        cpu_health = self._cpu_batch(daemon, contenders["health"], s.cpu_batch)
        memory = daemon.status()

        run, floor, health = (Latency.of(samples[k]) for k in ("run", "floor", "health"))
        paired = pct([a - b for a, b in zip(samples["run"], samples["floor"])], 50)
        return Step(
            idle_contexts=n, contexts_reported=contexts_reported, created=len(created),
            create_p50_s=pct(created, 50) if created else None, settle_wait_s=settle_wait_s,
            machine_idle_settled=idle_settled, loadavg=load, idle=idle, run=run, floor=floor,
            health=health, overhead_p50_s=run.p50 - floor.p50, paired_overhead_p50_s=paired,
            machine_idle_rounds=machine_idle_rounds, cpu_per_run=cpu_run,
            cpu_per_health=cpu_health, memory=memory)

    def _idle_window(self, daemon: Daemon, window_s: float) -> IdleCost:
        pids = self.kernel_pids()
        meter = machine.IdleMeter()
        k0 = _cpu_of(pids)
        c0, s0 = procs.process_cpu_s(daemon.pid), procs.schedstat(daemon.pid)
        t0 = time.perf_counter()
        time.sleep(window_s)
        c1, s1 = procs.process_cpu_s(daemon.pid), procs.schedstat(daemon.pid)
        dt = time.perf_counter() - t0
        k1 = _cpu_of(pids)
        stat = c1 - c0
        sched = (s1["cpu_ns"] - s0["cpu_ns"]) / 1e9
        same = s0["slices_by_tid"].keys() == s1["slices_by_tid"].keys()
        cpu = sched if same else stat
        return IdleCost(window_s=dt, daemon_cpu_s=cpu, daemon_cpu_stat_s=stat,
                        daemon_cpu_sched_s=sched, same_threads=same,
                        core_pct=100 * cpu / dt, core_pct_stat=100 * stat / dt,
                        wakeups_per_s=procs.slices_between(s0, s1) / dt,
                        kernels_cpu_s=k1 - k0, machine_idle=meter.stop())

    @staticmethod
    def _cpu_batch(daemon: Daemon, once: Callable[[], float], n: int) -> CpuPerRequest:
        gc.collect()
        gc.disable()
        try:
            c0, s0, t0 = procs.process_cpu_s(daemon.pid), procs.schedstat(daemon.pid), time.perf_counter()
            for _ in range(n):
                once()
            c1, s1, t1 = procs.process_cpu_s(daemon.pid), procs.schedstat(daemon.pid), time.perf_counter()
        finally:
            gc.enable()
        threads = {t: (s1["threads"].get(t, 0) - s0["threads"].get(t, 0)) / n / 1e9
                   for t in s1["threads"]}
        return CpuPerRequest(requests=n, cpu_s=(c1 - c0) / n,
                             cpu_sched_s=(s1["cpu_ns"] - s0["cpu_ns"]) / n / 1e9,
                             slices=procs.slices_between(s0, s1) / n, by_thread_s=threads,
                             wall_s=(t1 - t0) / n)
