"""Overhead: what the daemon itself adds and costs (SPEC section 7, "Bridge
overhead", "Daemon memory").

  back-to-back  per kernelspec, one daemon (no pool) and one context: the
                bridge (`POST /run`, kept alive) and the floor attached to
                the daemon's own kernel process (kbbench/raw.py), alternating,
                with `GET /health`; then the daemon's CPU time and run slices
                per request (/proc/PID/task/*/schedstat, all threads); with
                `more` contexts, the same again once that many more idle
                contexts are on the daemon (does the cost grow?)
  memory        a fresh daemon's VmRSS/RssAnon/RssFile idle (as shipped, with
                its pooled kernel, and without a pool), with kept-alive
                connections, with N python3 contexts, after a run on each,
                after deleting them (and a second cycle); its largest mappings

Not for: interleaved latency against peers (latency.py).
"""

import gc
import json
import os
import threading
import time
from typing import Any, Callable

from . import procs, raw
from .calls import health_once, run_once
from .daemon import NO_POOL, Daemon
from .httpclient import Http
from .latency import raw_once
from .results import Figures, figure
from .stats import pct, summary, us

CODE = "1+1"


def back_to_back(clients: dict[str, Callable[[], float]], daemon: Daemon, n: int) -> dict[str, Any]:
    """The bridge and the floor on the same kernel process, alternating (and
    /health); then the daemon's CPU time and scheduling per request."""
    res: dict[str, Any] = {}
    pairs: dict[str, list[float]] = {"kernelbridge": [], "floor-own": [], "health": []}
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            for k in pairs:
                pairs[k].append(clients[k]())
    finally:
        gc.enable()
    for k, v in pairs.items():
        res[k] = summary(v)
    res["paired_bridge_minus_own"] = pct([a - b for a, b in zip(pairs["kernelbridge"],
                                                                 pairs["floor-own"])], 50)
    for k in ("kernelbridge", "health"):
        before = procs.schedstat(daemon.pid)
        for _ in range(n):
            clients[k]()
        res[f"daemon_per_{k}"] = procs.per_request(before, procs.schedstat(daemon.pid), n)
    return res


def per_kernel(binary: str, workdir: str, kname: str, warmup: int, n: int, more: int,
               log: Callable[..., None]) -> dict[str, Any]:
    """{"1": back_to_back with one context, and str(1 + more): with more idle ones}."""
    daemon = Daemon(binary, workdir, NO_POOL)
    out: dict[str, Any] = {}
    own = None
    h = None
    try:
        ctx, conn_file, _ = daemon.create_context(kernel_name=kname)
        assert conn_file, "no connection file for the daemon's kernel"
        own = raw.attach(conn_file)
        body = json.dumps({"code": CODE, "context_id": ctx["context_id"]}).encode()
        h = Http(daemon.port)
        clients = {"kernelbridge": lambda: run_once(h, body),
                   "floor-own": lambda: raw_once(own),
                   "health": lambda: health_once(h)}
        for _ in range(warmup):
            for fn in clients.values():
                fn()
        log(f"overhead: {kname}: back to back, 1 context")
        out["1"] = back_to_back(clients, daemon, n)
        if more:
            log(f"overhead: {kname}: starting {more} more contexts")
            others = [daemon.create_context(kernel_name=kname)[0] for _ in range(more)]
            time.sleep(1)
            log(f"overhead: {kname}: back to back, {more + 1} contexts")
            out[str(more + 1)] = back_to_back(clients, daemon, n)
            for o in others:
                daemon.delete_context(o, wait=False)
    finally:
        if h:
            h.close()
        if own:
            own.close()
        daemon.stop()
        daemon.kill_processes_left()
    return out


def _threads(fn: Callable[[int], None], n: int) -> None:
    errors: list[BaseException] = []

    def guarded(w: int) -> None:
        try:
            fn(w)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]


def memory(binary: str, tmp: str, n_contexts: int, n_conns: int, cycles: int,
           log: Callable[..., None]) -> dict[str, Any]:
    out: dict[str, Any] = {"n_contexts": n_contexts, "n_connections": n_conns}
    shipped = Daemon(binary, os.path.join(tmp, "mem-shipped"))  # as shipped: one pooled kernel
    try:
        out["shipped_pool"] = shipped.wait_pool_settled()
        time.sleep(0.5)
        out["idle_shipped"] = shipped.status()
    finally:
        shipped.stop()
    daemon = Daemon(binary, os.path.join(tmp, "mem-daemon"), NO_POOL)
    conns = [Http(daemon.port) for _ in range(n_conns)]
    try:
        time.sleep(0.5)
        out["idle"] = daemon.status()
        out["idle_rollup"] = procs.smaps_rollup(daemon.pid)
        out["idle_top_mappings"] = procs.rss_by_mapping(daemon.pid)
        for h in conns:
            h.json("GET", "/health")
        out["connections"] = daemon.status()
        for cycle in range(cycles):
            log(f"overhead: memory: cycle {cycle + 1}: {n_contexts} contexts over {n_conns} connections")
            _cycle(daemon, conns, n_contexts, out, "" if cycle == 0 else f"_{cycle + 1}")
    finally:
        for h in conns:
            h.close()
        daemon.stop()
    return out


def _cycle(daemon: Daemon, conns: list[Http], n: int, out: dict[str, Any], tag: str) -> None:
    """Create n contexts over the connections, (the first time) run `1+1` on
    each, delete them; the daemon's status after each step."""
    ctxs: list[Any] = [None] * n
    step = len(conns)

    def create(w: int) -> None:
        for i in range(w, n, step):
            ctxs[i] = daemon.create_context(http=conns[w], kernel_name="python3")[0]

    def run(w: int) -> None:
        for i in range(w, n, step):
            conns[w].json("POST", "/run", {"code": CODE, "context_id": ctxs[i]["context_id"]})

    def delete(w: int) -> None:
        for i in range(w, n, step):
            daemon.delete_context(ctxs[i], http=conns[w])

    _threads(create, step)
    time.sleep(0.5)
    out["contexts" + tag] = daemon.status()
    if not tag:
        out["contexts_rollup"] = procs.smaps_rollup(daemon.pid)
        _threads(run, step)
        out["contexts_after_run"] = daemon.status()
    _threads(delete, step)
    time.sleep(0.5)
    out["after_delete" + tag] = daemon.status()


def figures(details: dict[str, Any]) -> Figures:
    out: Figures = {}
    for k, steps in details["back_to_back"].items():
        W = steps["1"]
        out[f"{k}.back_to_back_overhead_us"] = figure(
            f"{k}: back-to-back overhead", W["paired_bridge_minus_own"] * 1e6, "µs")
        out[f"{k}.cpu_per_run_us"] = figure(f"{k}: daemon CPU per run (schedstat)",
                                            W["daemon_per_kernelbridge"]["cpu_us"], "µs")
        for n, S in steps.items():
            if n != "1":
                out[f"{k}.{n}.back_to_back_overhead_us"] = figure(
                    f"{k}: back-to-back overhead with {n} contexts",
                    S["paired_bridge_minus_own"] * 1e6, "µs")
                out[f"{k}.{n}.cpu_per_run_us"] = figure(
                    f"{k}: daemon CPU per run with {n} contexts",
                    S["daemon_per_kernelbridge"]["cpu_us"], "µs")
    M = details.get("memory")
    if M:
        n, base = M["n_contexts"], M["connections"]
        out["memory.idle_rss_anon_kib"] = figure("daemon RssAnon idle", M["idle"]["RssAnon"], "KiB")
        out["memory.per_context_kib"] = figure(
            "daemon RSS per context", (M["contexts"]["VmRSS"] - base["VmRSS"]) / n, "KiB")
        out["memory.idle_rss_kib"] = figure("daemon VmRSS idle (shared libraries included)",
                                            M["idle"]["VmRSS"], "KiB")
        out["memory.per_context_anon_kib"] = figure(
            "daemon RssAnon per context", (M["contexts"]["RssAnon"] - base["RssAnon"]) / n, "KiB")
    return out


def tables(details: dict[str, Any]) -> list[str]:
    lines = [f"### Back to back ({details['n']} rounds of bridge, floor on the same kernel "
             "process, /health), and the daemon's CPU per request (schedstat, all threads; µs)", "",
             "| kernel | contexts | bridge p50 | floor (own kernel) p50 | paired difference p50 "
             "| /health p50 | daemon CPU per /run | run slices per /run | daemon CPU per /health |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, steps in details["back_to_back"].items():
        for n, W in steps.items():
            dr, dh = W["daemon_per_kernelbridge"], W["daemon_per_health"]
            lines.append(
                f"| {k} | {n} | {us(W['kernelbridge']['p50'])} | {us(W['floor-own']['p50'])} | "
                f"{us(W['paired_bridge_minus_own'])} | {us(W['health']['p50'])} | "
                f"{dr['cpu_us']:,.0f} ({procs.threads_text(dr['by_thread_us'])}) | "
                f"{dr['slices']:.1f} | {dh['cpu_us']:,.0f} |")
    lines.append("")
    if details.get("memory"):
        lines += memory_table(details["memory"])
    return lines


def memory_table(M: dict[str, Any]) -> list[str]:
    n, base, idle = M["n_contexts"], M["connections"]["VmRSS"], M["idle"]
    lines = ["### Daemon memory (KiB, /proc/PID/status)", "",
             "| state | VmRSS | RssAnon | RssFile | threads |", "|---|---:|---:|---:|---:|"]
    for key, label in (("idle_shipped", "as shipped (default pool), idle, pool ready"),
                       ("idle", "`--pool python=0`, idle, just started"),
                       ("connections", f"+ {M['n_connections']} kept-alive HTTP connections"),
                       ("contexts", f"+ {n} python3 contexts"),
                       ("contexts_after_run", "+ one `1+1` run on each"),
                       ("after_delete", "contexts deleted"),
                       ("contexts_2", f"{n} contexts created again"),
                       ("after_delete_2", "deleted again")):
        if key in M:
            s = M[key]
            lines.append(f"| {label} | {s['VmRSS']:,} | {s['RssAnon']:,} | {s['RssFile']:,} "
                         f"| {s['Threads']} |")
    full = M["contexts"]["VmRSS"]
    lines += ["", f"- idle: RSS {idle['VmRSS']:,} KiB = file-backed (shared libraries) "
              f"{idle['RssFile']:,} KiB + anonymous {idle['RssAnon']:,} KiB; PSS "
              f"{M['idle_rollup'].get('Pss', 0):,} KiB.",
              "- largest resident mappings idle: " + ", ".join(
                  f"{name} {kib:,}" for name, kib in M["idle_top_mappings"]) + " (KiB).",
              f"- per context: ({full:,} − {base:,}) / {n} = **{(full - base) / n:,.0f} KiB**; "
              f"after one run each: {(M['contexts_after_run']['VmRSS'] - base) / n:,.0f} KiB.", ""]
    return lines
