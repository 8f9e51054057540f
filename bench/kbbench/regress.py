"""Regression: this build against a baseline build of the daemon, side by
side on one machine in one run (SPEC section 7, "no regression" of a
change that should not alter behaviour).

  run       one daemon of each build (no pool) with one python3 context;
            `1+1` through POST /run on both, in interleaved rounds of a
            shuffled order (stats.interleave): the p50 of each and their
            ratio; the daemon's CPU per run (schedstat of all its threads,
            read before and after the rounds: each daemon did only its own
            runs meanwhile)
  memory    contexts created on both daemons in turn, one at a time: each
            daemon's VmRSS growth per context

Not for: the overhead against the raw floor (overhead.py).
"""

import json
import os
import time
from typing import Any, Callable

from . import procs
from .calls import run_once
from .daemon import NO_POOL, Daemon
from .httpclient import Http
from .results import Figures, figure
from .stats import interleave, summary, us

CODE = "1+1"
NAMES = ("build", "baseline")


def _start(binaries: dict[str, str], tmp: str) -> dict[str, Daemon]:
    daemons: dict[str, Daemon] = {}
    for name in NAMES:
        daemons[name] = Daemon(binaries[name], os.path.join(tmp, f"regress-{name}"), NO_POOL)
    return daemons


def _runs(daemons: dict[str, Daemon], warmup: int, n: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    conns: dict[str, Http] = {}
    try:
        clients: dict[str, Callable[[], float]] = {}
        for name, d in daemons.items():
            ctx = d.create_context(kernel_name="python3")[0]
            body = json.dumps({"code": CODE, "context_id": ctx["context_id"]}).encode()
            conns[name] = Http(d.port)
            clients[name] = (lambda h, b: lambda: run_once(h, b))(conns[name], body)
        for fn in clients.values():
            for _ in range(warmup):
                fn()
        before = {name: procs.schedstat(d.pid) for name, d in daemons.items()}
        samples = interleave(clients, 0, n, seed)
        after = {name: procs.schedstat(d.pid) for name, d in daemons.items()}
        for name in daemons:
            out[name] = summary(samples[name])
            out[name]["daemon_per_run"] = procs.per_request(before[name], after[name], n)
    finally:
        for h in conns.values():
            h.close()
    return out


def _memory(daemons: dict[str, Daemon], n_contexts: int) -> dict[str, Any]:
    """Each daemon's VmRSS before and after n_contexts contexts, made in turn."""
    time.sleep(0.5)
    out: dict[str, Any] = {name: {"before": d.status()} for name, d in daemons.items()}
    made: dict[str, list[Any]] = {name: [] for name in daemons}
    for _ in range(n_contexts):
        for name, d in daemons.items():
            made[name].append(d.create_context(kernel_name="python3")[0])
    time.sleep(0.5)
    for name, d in daemons.items():
        out[name]["after"] = d.status()
        grown = out[name]["after"]["VmRSS"] - out[name]["before"]["VmRSS"]
        out[name]["per_context_kib"] = grown / n_contexts
        for ctx in made[name]:
            d.delete_context(ctx, wait=False)
    return out


def measure(binaries: dict[str, str], tmp: str, warmup: int, n: int, n_contexts: int,
            seed: int, log: Callable[..., None]) -> dict[str, Any]:
    daemons = _start(binaries, tmp)
    details: dict[str, Any] = {"binaries": binaries, "n": n, "warmup": warmup,
                               "n_contexts": n_contexts}
    try:
        log(f"regress: {n} interleaved rounds of 1+1 on each build")
        details["run"] = _runs(daemons, warmup, n, seed)
        log(f"regress: {n_contexts} contexts on each build, in turn")
        details["memory"] = _memory(daemons, n_contexts)
    finally:
        for d in daemons.values():
            d.stop()
            d.kill_processes_left()
    return details


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def figures(details: dict[str, Any]) -> Figures:
    R, M = details["run"], details["memory"]
    cpu = {k: R[k]["daemon_per_run"]["cpu_us"] for k in NAMES}
    return {
        "run.p50_ratio": figure("POST /run p50, this build ÷ the baseline (interleaved)",
                                _ratio(R["build"]["p50"], R["baseline"]["p50"]), "x"),
        "run.cpu_ratio": figure("the daemon's CPU per run, this build ÷ the baseline",
                                _ratio(cpu["build"], cpu["baseline"]), "x"),
        "memory.per_context_added_kib": figure(
            "the daemon's RSS per context, this build − the baseline",
            M["build"]["per_context_kib"] - M["baseline"]["per_context_kib"], "KiB"),
        "run.build_p50_us": figure("POST /run p50, this build", R["build"]["p50"] * 1e6, "µs"),
        "run.build_cpu_us": figure("the daemon's CPU per run, this build", cpu["build"], "µs"),
    }


def tables(details: dict[str, Any]) -> list[str]:
    R, M = details["run"], details["memory"]
    lines = ["| build | POST /run p50 µs | p90 µs | daemon CPU per run µs | RSS per context KiB |",
             "|---|---:|---:|---:|---:|"]
    for k in NAMES:
        lines.append(f"| {k} | {us(R[k]['p50'])} | {us(R[k]['p90'])} | "
                     f"{R[k]['daemon_per_run']['cpu_us']:,.0f} | "
                     f"{M[k]['per_context_kib']:,.1f} |")
    return lines
