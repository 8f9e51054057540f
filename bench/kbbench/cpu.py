"""CPU: where the daemon's CPU goes for one `1+1` run, counted (SPEC
section 7, "daemon CPU per run").

  callgrind  per kernelspec, a daemon run under `valgrind --tool=callgrind
             --separate-threads=yes` (its own slow clock: longer timeouts),
             one context, a warm-up, then `callgrind_control --zero`, N
             runs of `1+1` through `POST /run` over one kept-alive
             connection, `callgrind_control --dump`: the instructions of
             that window only, per thread (a dump file each) and per
             function (self cost, summed over the threads). Instructions
             do not depend on what else the machine does.
  schedstat  per kernelspec, the same daemon without valgrind: the bridge
             and the floor on the daemon's own kernel process alternating
             (kbbench/overhead.py's back to back), then the daemon's CPU
             time and run slices per run by thread name from
             /proc/PID/task/*/schedstat (noisy on a busy machine).

A dump file names no thread; its thread is recognised by the function it
started in or the library that started it (thread_names): every thread of
the daemon starts in a function of its own.

Not for: latency against peers (latency.py), memory (overhead.py).
"""

import collections
import json
import os
import re
import shutil
import subprocess
import time
from typing import Any, Callable

from . import overhead
from .calls import run_once
from .daemon import NO_POOL, Daemon
from .httpclient import Http
from .results import Figures, figure

CODE = "1+1"
TOP = 20  # functions listed per kernelspec

# The function each of the daemon's own threads starts in, and its name;
# libczmq's thread shim runs the engine's actor; libzmq's and
# libmicrohttpd's threads are known by their library (their functions have
# no symbols): libzmq's I/O thread does the work of every message, its
# reaper none, and a connection's thread of libmicrohttpd runs the daemon's
# routes.
ENTRIES = {"s_writer": "kb-persist", "s_watchdog": "kb-watchdog"}
ZMQ_THREADS = ("ZMQbg/Reaper", "ZMQbg/IO/0")  # told apart by their work: thread_names
IDLE_IR = 100  # fewer instructions in the window: a thread that slept through it
# Work on a timer, not per run: the limits' sampler (every 100 ms while a
# run runs; it lists /proc when any pid was given out on the machine), so
# it grows with callgrind's slow clock and with the machine's other work.
# Counted apart (inclusive), and left out of the figure to compare builds.
TIMED = ("s_tick",)

def valgrind_wrapper(binary: str, tmp: str) -> tuple[str, str]:
    """A script that runs the binary under callgrind, dumps going to a dir of
    their own; (the script, the dir)."""
    out = os.path.join(tmp, "callgrind")
    os.makedirs(out, exist_ok=True)
    script = os.path.join(tmp, "kernelbridge-callgrind")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nexec valgrind --tool=callgrind --separate-threads=yes "
                f"--compress-strings=no --compress-pos=no --callgrind-out-file={out}/cg.%p "
                f"{binary} \"$@\"\n")
    os.chmod(script, 0o755)
    return script, out


def _control(pid: int, what: str) -> None:
    r = subprocess.run(["callgrind_control", what, str(pid)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0 or "OK" not in r.stdout:
        raise RuntimeError(f"callgrind_control {what} {pid}: {r.stdout} {r.stderr}")


COST = re.compile(r"^[+\-*0-9]")


def parse_dump(path: str) -> dict[str, Any]:
    """One thread's dump: {"total": Ir, "self": {function [object]: Ir}, "fns":
    names, "entry": (object, function) that start_thread called}."""
    self_cost: collections.Counter[str] = collections.Counter()
    fns: set[str] = set()
    ob = fn = cob = cfn = ""
    entry = ("", "")
    timed = 0
    after_call = False
    with open(path) as f:
        for line in f:
            if COST.match(line):
                if after_call:  # the inclusive cost of a call: not this function's own
                    after_call = False
                    if cfn in TIMED and fn not in TIMED:
                        timed += int(line.split()[1])
                    continue
                parts = line.split()
                if len(parts) > 1:
                    self_cost[f"{fn} [{ob}]"] += int(parts[1])
            elif line.startswith("fn="):
                fn = line[3:].strip()
                fns.add(fn)
            elif line.startswith("ob="):
                ob = os.path.basename(line[3:].strip())
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("cob="):
                cob = os.path.basename(line[4:].strip())
            elif line.startswith("cfn="):
                cfn = line[4:].strip()
                fns.add(cfn)
                if fn == "start_thread":
                    entry = (cob or ob, line[4:].strip())
    return {"total": sum(self_cost.values()), "self": dict(self_cost), "fns": fns,
            "entry": entry, "timed": timed}


def thread_names(dumps: list[dict[str, Any]]) -> list[str]:
    """The name of each dump's thread (dumps in the order of valgrind's thread ids).

    Of libzmq's threads the I/O thread is the one that did the most (every
    message goes through it); the reaper sleeps through the window, and
    when it did nothing at all its dump names no library (an idle thread)."""
    names = []
    zmq = [i for i, d in enumerate(dumps) if d["entry"][0].startswith("libzmq")]
    io_thread = max(zmq, key=lambda i: dumps[i]["total"]) if zmq else -1
    for i, d in enumerate(dumps):
        lib, fn = d["entry"]
        if fn in ENTRIES:
            name = ENTRIES[fn]
        elif "s_engine_actor" in d["fns"]:
            name = "kb-engine"
        elif lib.startswith("libzmq"):
            name = ZMQ_THREADS[1] if i == io_thread else ZMQ_THREADS[0]
        elif lib.startswith("libmicrohttpd"):
            name = "MHD-connection" if any(f.startswith("kb_") for f in d["fns"]) else "MHD-listen"
        elif "main" in d["fns"] and not lib:
            name = "main"
        else:
            name = f"thread {i + 1} (idle)" if d["total"] < IDLE_IR else f"thread {i + 1}"
        names.append(name)
    return names


def _dumps(out: str, pid: int, timeout: float = 60.0) -> list[str]:
    """The files of the first dump (part 1), once their sizes stop changing."""
    pattern = re.compile(rf"^cg\.{pid}\.1-(\d+)$")
    deadline = time.monotonic() + timeout
    last: dict[str, int] = {}
    while time.monotonic() < deadline:
        files = {n: os.path.getsize(os.path.join(out, n)) for n in os.listdir(out)
                 if pattern.match(n)}
        if files and files == last:
            return sorted(os.path.join(out, n) for n in files)
        last = files
        time.sleep(0.5)
    raise RuntimeError(f"no callgrind dump of {pid} in {out}")


def callgrind(binary: str, workdir: str, kname: str, warmup: int, n: int,
              log: Callable[..., None], keep: str | None = None) -> dict[str, Any]:
    """The instructions of n `1+1` runs, per run: total, by thread, top functions."""
    script, out = valgrind_wrapper(binary, workdir)
    daemon = Daemon(script, os.path.join(workdir, "daemon"), NO_POOL, timeout=180)
    h = None
    try:
        h = Http(daemon.port, timeout=300)
        ctx = daemon.create_context(h, kernel_name=kname)[0]
        body = json.dumps({"code": CODE, "context_id": ctx["context_id"]}).encode()
        for _ in range(warmup):
            run_once(h, body)
        log(f"cpu: {kname}: callgrind: {n} runs")
        _control(daemon.pid, "--zero")
        t0 = time.perf_counter()
        for _ in range(n):
            run_once(h, body)
        wall = time.perf_counter() - t0
        _control(daemon.pid, "--dump")
        files = _dumps(out, daemon.pid)
        if keep:
            os.makedirs(keep, exist_ok=True)
            for p in files:
                shutil.copy(p, os.path.join(keep, f"{kname}.{os.path.basename(p)}"))
    finally:
        if h:
            h.close()
        daemon.stop(timeout=120)
        daemon.kill_processes_left()
    files.sort(key=lambda p: int(p.rsplit("-", 1)[1]))
    return summarise([parse_dump(p) for p in files], n, wall)


def summarise(dumps: list[dict[str, Any]], n: int, wall: float) -> dict[str, Any]:
    by_thread: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    for d, name in zip(dumps, thread_names(dumps)):
        by_thread[name] += d["total"]
        functions.update(d["self"])
    total = sum(by_thread.values())
    timed = sum(d["timed"] for d in dumps)
    return {
        "n": n,
        "wall_per_run_s": wall / n,
        "instructions_per_run": total / n,
        "timed_per_run": timed / n,
        "per_run_without_timed": (total - timed) / n,
        "by_thread": {t: v / n for t, v in by_thread.most_common()},
        "top_functions": {f: v / n for f, v in functions.most_common(TOP)},
    }


def schedstat(binary: str, workdir: str, kname: str, warmup: int, n: int,
              log: Callable[..., None]) -> dict[str, Any]:
    """overhead.py's back to back on one context: the bridge over the floor on
    the daemon's own kernel, and the daemon's CPU per run by thread."""
    log(f"cpu: {kname}: schedstat: {n} rounds")
    steps = overhead.per_kernel(binary, workdir, kname, warmup, n, 0, log)
    W = steps["1"]
    return {
        "n": n,
        "overhead_us": W["paired_bridge_minus_own"] * 1e6,
        "run_p50_us": W["kernelbridge"]["p50"] * 1e6,
        "floor_p50_us": W["floor-own"]["p50"] * 1e6,
        "per_run": W["daemon_per_kernelbridge"],
        "per_health": W["daemon_per_health"],
    }


def figures(details: dict[str, Any]) -> Figures:
    out: Figures = {}
    for k, D in details["kernels"].items():
        S, C = D.get("schedstat"), D.get("callgrind")
        if S:
            out[f"{k}.cpu_per_run_us"] = figure(
                f"{k}: daemon CPU per `1+1` run, all threads (schedstat)",
                S["per_run"]["cpu_us"], "µs")
            out[f"{k}.overhead_us"] = figure(
                f"{k}: bridge overhead p50, back to back on the daemon's own kernel (paired)",
                S["overhead_us"], "µs")
            out[f"{k}.slices_per_run"] = figure(
                f"{k}: the daemon's run slices (wake-ups) per run, all threads",
                S["per_run"]["slices"], "")
        if C:
            out[f"{k}.instructions_per_run"] = figure(
                f"{k}: the daemon's instructions per run, all threads, the limits' sampler "
                "left out (callgrind)", round(C["per_run_without_timed"]), "count")
            out[f"{k}.instructions_per_run.sampler"] = figure(
                f"{k}: instructions per run in the limits' sampler (on a timer: grows with "
                "callgrind's slow clock)", round(C["timed_per_run"]), "count")
            for t in ("kb-engine", "MHD-connection", "kb-persist", "ZMQbg/IO/0"):
                out[f"{k}.instructions_per_run.{t}"] = figure(
                    f"{k}: instructions per run, thread {t}",
                    round(C["by_thread"].get(t, 0)), "count")
    return out


def tables(details: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for k, D in details["kernels"].items():
        S, C = D.get("schedstat"), D.get("callgrind")
        sched = {("main" if t == "engine+main" else t): v  # the main thread, named as the binary
                 for t, v in (S or {}).get("per_run", {}).get("by_thread_us", {}).items()}
        threads = sorted(set((C or {}).get("by_thread", {})) | set(sched))
        lines += [f"### {k}: the daemon per `1+1` run, by thread", "",
                  "| thread | instructions per run (callgrind) | CPU per run (schedstat, µs) |",
                  "|---|---:|---:|"]
        for t in threads:
            ir = (C or {}).get("by_thread", {}).get(t)
            cpu = sched.get(t)
            lines.append(f"| {t} | {'-' if ir is None else f'{ir:,.0f}'} | "
                         f"{'-' if cpu is None else f'{cpu:,.1f}'} |")
        if C:
            lines.append(f"| all | {C['instructions_per_run']:,.0f} | "
                         f"{S['per_run']['cpu_us']:,.1f} |" if S else
                         f"| all | {C['instructions_per_run']:,.0f} | - |")
            lines.append(f"| of which the limits' sampler (on a timer) | "
                         f"{C['timed_per_run']:,.0f} | - |")
            lines += ["", f"### {k}: top functions by own instructions per run (callgrind, "
                      f"{C['n']} runs)", "", "| function [object] | instructions per run | share |",
                      "|---|---:|---:|"]
            total = C["instructions_per_run"] or 1
            lines += [f"| `{f}` | {v:,.0f} | {100 * v / total:.1f}% |"
                      for f, v in C["top_functions"].items()]
        if S:
            lines += ["", f"{k}: bridge overhead p50 {S['overhead_us']:,.0f} µs (POST /run p50 "
                      f"{S['run_p50_us']:,.0f} µs, floor {S['floor_p50_us']:,.0f} µs), run "
                      f"slices per run {S['per_run']['slices']:.1f}, CPU per /health "
                      f"{S['per_health']['cpu_us']:,.1f} µs"]
        lines.append("")
    return lines
