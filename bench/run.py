#!/usr/bin/python3
"""kernelbridge benchmarks, side by side in one run (SPEC section 7).

    /usr/bin/python3 bench/run.py [--quick] [--json FILE] [--sections ...]

Measures on this machine, with the same kernelspecs for every contender:

  latency   `1+1` round trip, interleaved in shuffled turns: a raw ZeroMQ
            client (the floor), kernelbridge POST /run over a kept-alive
            connection, jupyter_client execute_interactive, Jupyter Server's
            kernel websocket; for ipykernel (python3) and xeus-python (xpython)
  create    cold context creation vs the kernel's own start-up (raw client)
            vs jupyter_client start_new_kernel
  scaling   (not in --quick) the bridge's cost per run with 1 and with 20
            contexts on the daemon
  memory    daemon RSS idle, with 20 contexts, per context
  output    bench/output.py's output axis (one round in --quick): 100 MiB
            through POST /run vs the raw client's rate, the daemon's peak RSS
            for 200 MiB runs alone, four at once and to a stalled SSE reader,
            and its RSS after the records are purged

and prints Markdown tables plus the verdict on each target. Everything runs
on 127.0.0.1 with ephemeral ports and private temporary directories; every
process started is stopped at the end.
"""

import argparse
import atexit
import gc
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from kbbench import output_axis, output_report, peers, raw  # noqa: E402
from kbbench.calls import health_once, run_once  # noqa: E402
from kbbench.machine import environment, loadavg, private_environment, wait_quiet  # noqa: E402
from kbbench.stats import interleave, pct, summary, us  # noqa: E402

CODE_1P1 = "1+1"
NO_POOL = ("--pool", "python=0")  # the daemon alone: no pre-started kernel

CLEANUPS = []  # callables run (last first) at exit


def cleanup():
    while CLEANUPS:
        fn = CLEANUPS.pop()
        try:
            fn()
        except Exception as e:  # keep stopping the rest
            print(f"cleanup: {e}", file=sys.stderr)
    peers.stop_all()


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ms(s):
    return f"{s * 1e3:,.1f}"


# ---- 1. latency ---------------------------------------------------------------


def section_latency(args, tmp, binary, server):
    out = {}
    daemon = peers.Daemon(binary, os.path.join(tmp, "lat-daemon"))
    CLEANUPS.append(daemon.stop)
    for kname in args.kernels:
        log(f"latency: {kname}: starting kernels")
        kdir = os.path.join(tmp, f"lat-{kname}")
        os.makedirs(kdir)
        clients = {}
        closers = []
        try:
            _latency_kernel(args, kname, kdir, daemon, server, clients, closers, out)
        finally:
            for fn in reversed(closers):
                try:
                    fn()
                except Exception as e:
                    log(f"latency cleanup: {e}")
    daemon.stop()
    CLEANUPS.remove(daemon.stop)
    return out


def _latency_kernel(args, kname, kdir, daemon, server, clients, closers, out):
    """Start every contender on kernelspec kname, then measure them."""
    # (a) the floor, ipc (the daemon's default transport) and tcp
    for transport in ("ipc", "tcp"):
        rk = raw.RawKernel(kname, os.path.join(kdir, f"raw-{transport}"), transport).start()
        closers.append(rk.shutdown)
        clients[f"floor-{transport}"] = lambda rk=rk: _raw_once(rk.client)

    # (b) kernelbridge over HTTP, kept alive, pre-created context
    ctx, conn_file, _ = daemon.create_context(kernel_name=kname)
    closers.append(lambda ctx=ctx: daemon.delete_context(ctx))
    daemon.wait_pool_settled()  # a taken pooled kernel is replaced in the background
    body = json.dumps({"code": CODE_1P1, "context_id": ctx["context_id"]}).encode()
    bridge_http = peers.Http(daemon.port)
    closers.append(bridge_http.close)
    clients["kernelbridge"] = lambda h=bridge_http, b=body: run_once(h, b)

    # (a') the floor on the daemon's own kernel process
    if conn_file:
        own = raw.attach(conn_file)
        closers.append(own.close)
        clients["floor-own"] = lambda c=own: _raw_once(c)

    # diagnostics: empty HTTP round trip; a one-write HTTP client
    health_http = peers.Http(daemon.port)
    closers.append(health_http.close)
    clients["health"] = lambda h=health_http: health_once(h)
    rh = peers.RawHttp(daemon.port)
    closers.append(rh.close)
    clients["kernelbridge-rawhttp"] = lambda h=rh, b=body: run_once(h, b)

    # (c) jupyter_client execute_interactive
    jck = peers.JupyterClientKernel(kname, os.path.join(kdir, "jc"))
    closers.append(jck.shutdown)
    clients["jupyter_client"] = lambda k=jck: k.execute(CODE_1P1)

    # (d) Jupyter Server kernel websocket
    kid = server.start_kernel(kname)
    closers.append(lambda kid=kid: server.shutdown_kernel(kid))
    ws = server.websocket(kid)
    closers.append(ws.close)
    clients["jupyter_server_ws"] = lambda w=ws: w.execute(CODE_1P1)
    # (d') the same with TCP_NODELAY on the server's side of the websocket
    kid2 = server.start_kernel(kname)
    closers.append(lambda kid=kid2: server.shutdown_kernel(kid))
    ws2 = server.websocket(kid2, nodelay=True)
    closers.append(ws2.close)
    clients["jupyter_server_ws_nodelay"] = lambda w=ws2: w.execute(CODE_1P1)

    daemon.wait_pool_settled()
    for _ in range(args.warmup):
        for fn in clients.values():
            fn()
    log_from = os.path.getsize(daemon.log_path)
    out[kname] = _interleave(clients, 0, args.n, args.seed)
    # the daemon's own view of the same requests (its request log)
    with open(daemon.log_path, "rb") as f:
        f.seek(log_from)
        server_times = peers.request_log_times(f.read().decode(errors="replace"))
    out[kname]["server_log"] = {k: summary(v) for k, v in server_times.items() if v}
    # warm: back-to-back, no other client in between; and what the
    # daemon's threads spend per request (/proc/PID/task/*/schedstat)
    log(f"latency: {kname}: back-to-back phase")
    out[kname]["warm"] = _warm(clients, daemon, args.n_warm)


def _warm(clients, daemon, n):
    """Back-to-back runs: the bridge and the floor on the same kernel process,
    alternating; plus the daemon's CPU time and scheduling per request."""
    res = {}
    pairs = {"kernelbridge": [], "floor-own": [], "health": []}
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            for k in pairs:
                if k in clients:
                    pairs[k].append(clients[k]())
    finally:
        gc.enable()
    for k, v in pairs.items():
        if v:
            res[k] = summary(v)
    if pairs["floor-own"]:
        res["paired_bridge_minus_own"] = pct([a - b for a, b in zip(pairs["kernelbridge"], pairs["floor-own"])], 50)
    for k in ("kernelbridge", "health"):
        before = peers.schedstat(daemon.pid)
        for _ in range(n):
            clients[k]()
        after = peers.schedstat(daemon.pid)
        res[f"daemon_per_{k}"] = {
            "cpu_us": (after["cpu_ns"] - before["cpu_ns"]) / n / 1e3,
            "slices": (after["slices"] - before["slices"]) / n,
            "by_thread_us": {t: (after["threads"].get(t, 0) - before["threads"].get(t, 0)) / n / 1e3
                             for t in after["threads"]},
        }
    return res


def _raw_once(client):
    dt, _, status = client.execute(CODE_1P1)
    if status != "ok":
        raise RuntimeError(f"raw run: {status}")
    return dt


def _interleave(clients, warmup, n, seed):
    """Warm-up, then n rounds; each round runs every client once, in a shuffled order."""
    samples = interleave(clients, warmup, n, seed)
    res = {k: summary(v) for k, v in samples.items()}
    # paired (same round) differences: robust to slow drift of the machine
    for k in ("kernelbridge", "kernelbridge-rawhttp"):
        for base in ("floor-ipc", "floor-own"):
            if k in samples and base in samples:
                diffs = [a - b for a, b in zip(samples[k], samples[base])]
                res[k][f"paired_minus_{base}"] = pct(diffs, 50)
    return res


# ---- 1b. overhead vs number of contexts ------------------------------------------


def section_scaling(args, tmp, binary):
    """The same back-to-back measurement with 1 and then 20 contexts on the daemon
    (the 19 others idle): does the bridge's per-run cost grow with contexts?"""
    kname = "xpython" if "xpython" in args.kernels else args.kernels[0]
    daemon = peers.Daemon(binary, os.path.join(tmp, "scale-daemon"), NO_POOL)
    CLEANUPS.append(daemon.stop)
    out = {"kernel": kname}
    own = None
    try:
        ctx, conn_file, _ = daemon.create_context(kernel_name=kname)
        own = raw.attach(conn_file)
        body = json.dumps({"code": CODE_1P1, "context_id": ctx["context_id"]}).encode()
        h = peers.Http(daemon.port)
        clients = {"kernelbridge": lambda: run_once(h, body),
                   "floor-own": lambda: _raw_once(own),
                   "health": lambda: health_once(h)}
        for _ in range(args.warmup):
            for fn in clients.values():
                fn()
        log("scaling: 1 context")
        out["1"] = _warm(clients, daemon, args.n_warm)
        log("scaling: starting 19 more contexts")
        others = [daemon.create_context(kernel_name=kname)[0] for _ in range(19)]
        time.sleep(1)
        log("scaling: 20 contexts")
        out["20"] = _warm(clients, daemon, args.n_warm)
        for o in others:
            daemon.delete_context(o, wait=False)
        h.close()
    finally:
        if own:
            own.close()
        daemon.stop()
        CLEANUPS.remove(daemon.stop)
    return out


# ---- 2. context creation ----------------------------------------------------------


def section_create(args, tmp, binary):
    out = {}
    daemon = peers.Daemon(binary, os.path.join(tmp, "create-daemon"), NO_POOL)
    CLEANUPS.append(daemon.stop)
    rng = random.Random(args.seed + 1)
    for kname in args.kernels:
        samples = {"kernelbridge": [], "floor": [], "jupyter_client": []}
        resends, lags = [], []
        for i in range(args.create_rounds):
            order = list(samples)
            rng.shuffle(order)
            for who in order:
                log(f"create: {kname} round {i + 1}/{args.create_rounds}: {who}")
                if who == "kernelbridge":
                    ctx, _, dt = daemon.create_context(kernel_name=kname)
                    daemon.delete_context(ctx)
                elif who == "floor":
                    rk = raw.RawKernel(kname, os.path.join(tmp, f"create-{kname}-{i}"), "ipc")
                    try:
                        rk.start()
                        dt = rk.startup_s
                        resends.append(rk.kernel_info_sent)
                        lags.append(rk.iopub_lag_s)
                    finally:
                        rk.shutdown()
                else:
                    dt, km, kc = peers.jc_start_new_kernel(kname)
                    kc.stop_channels()
                    pid = km.provisioner.pid if km.provisioner else None
                    km.shutdown_kernel(now=False)
                    if pid:
                        peers.pid_gone(pid)
                samples[who].append(dt)
                time.sleep(0.2)  # let the torn-down kernel's exit settle
        out[kname] = {k: dict(summary(v), samples=v) for k, v in samples.items()}
        out[kname]["floor"]["kernel_info_sent"] = resends
        out[kname]["floor"]["iopub_lag"] = summary(lags)
    daemon.stop()
    CLEANUPS.remove(daemon.stop)

    # warm: a pool of one kernel per kernelspec; each create waits for the refill first
    pool_args = []
    for kname in args.kernels:
        pool_args += ["--pool", f"{kname}=1"]
    daemon = peers.Daemon(binary, os.path.join(tmp, "warm-daemon"), ["--pool", "python=0", *pool_args])
    CLEANUPS.append(daemon.stop)
    try:
        for kname in args.kernels:
            warm = []
            for i in range(args.warm_create_rounds):
                daemon.wait_pool_settled()
                time.sleep(0.05)
                ctx, _, dt = daemon.create_context(kernel_name=kname)
                warm.append(dt)
                daemon.delete_context(ctx)
            log(f"create: {kname}: warm pool, {len(warm)} creates")
            out[kname]["warm_pool"] = dict(summary(warm), samples=warm)
    finally:
        daemon.stop()
        CLEANUPS.remove(daemon.stop)
    return out


# ---- 3. memory ------------------------------------------------------------------


def section_memory(args, tmp, binary):
    out = {}
    # as shipped: the default pool keeps one python kernel ready
    shipped = peers.Daemon(binary, os.path.join(tmp, "mem-shipped"))
    CLEANUPS.append(shipped.stop)
    out["shipped_pool"] = shipped.wait_pool_settled()
    time.sleep(0.5)
    out["idle_shipped"] = shipped.status()
    shipped.stop()
    CLEANUPS.remove(shipped.stop)

    daemon = peers.Daemon(binary, os.path.join(tmp, "mem-daemon"), NO_POOL)
    CLEANUPS.append(daemon.stop)
    time.sleep(0.5)
    out["idle"] = daemon.status()
    out["idle_rollup"] = peers.smaps_rollup(daemon.pid)
    out["idle_top_mappings"] = peers.rss_by_mapping(daemon.pid)

    conns = [peers.Http(daemon.port) for _ in range(args.mem_threads)]
    for h in conns:
        h.json("GET", "/health")
    out["connections"] = daemon.status()

    ctxs = [None] * args.mem_contexts
    errors = []

    def worker(w):
        try:
            for i in range(w, args.mem_contexts, len(conns)):
                ctxs[i] = daemon.create_context(http=conns[w], kernel_name="python3")[0]
        except Exception as e:
            errors.append(e)

    log(f"memory: creating {args.mem_contexts} contexts over {len(conns)} connections")
    _run_threads(worker, len(conns))
    if errors:
        raise errors[0]
    time.sleep(0.5)
    out["contexts"] = daemon.status()
    out["contexts_rollup"] = peers.smaps_rollup(daemon.pid)

    def runner(w):
        try:
            for i in range(w, args.mem_contexts, len(conns)):
                body = {"code": CODE_1P1, "context_id": ctxs[i]["context_id"]}
                conns[w].json("POST", "/run", body)
        except Exception as e:
            errors.append(e)

    _run_threads(runner, len(conns))
    if errors:
        raise errors[0]
    out["contexts_after_run"] = daemon.status()

    def deleter(w):
        try:
            for i in range(w, args.mem_contexts, len(conns)):
                daemon.delete_context(ctxs[i], http=conns[w])
        except Exception as e:
            errors.append(e)

    _run_threads(deleter, len(conns))
    time.sleep(0.5)
    out["after_delete"] = daemon.status()
    if args.mem_cycles > 1:
        # a second create/delete cycle: a leak grows again, allocator reuse does not
        log(f"memory: second cycle of {args.mem_contexts} contexts")
        _run_threads(worker, len(conns))
        if errors:
            raise errors[0]
        time.sleep(0.5)
        out["contexts_2"] = daemon.status()
        _run_threads(deleter, len(conns))
        time.sleep(0.5)
        out["after_delete_2"] = daemon.status()
    for h in conns:
        h.close()
    out["n_contexts"] = args.mem_contexts
    out["n_connections"] = len(conns)
    daemon.stop()
    CLEANUPS.remove(daemon.stop)
    return out


def _run_threads(fn, n):
    threads = [threading.Thread(target=fn, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)


# ---- 4. output ----------------------------------------------------------------------


def section_output(args, tmp, binary):
    """bench/output.py's measurements (kbbench/output_axis.py), fewer rounds in --quick."""
    return output_axis.measure(binary, os.path.join(tmp, "output"), args.output_rounds,
                               args.seed + 2, log=log)


# ---- report --------------------------------------------------------------------------


def report(res, args):
    lines = []
    p = lines.append
    env = res["env"]
    p(f"Machine: {env['nproc']} CPUs ({env['cpu']}), {env['mem_gib']} GiB, Linux {env['kernel']}, "
      f"Python {env['python']}; kernelbridge {res.get('version', '?')} ({env['binary']}; "
      f"this checkout at {env['commit']}). "
      f"Before the run the CPUs were {100 * res['idle_before']:.0f}% idle; load average "
      f"{res['loadavg_before']} before, {res.get('loadavg_after', '?')} after.")
    p("")
    verdicts = []
    if "latency" in res:
        p(f"### 1. `1+1` latency (µs; {args.n} interleaved rounds in shuffled order, after {args.warmup} warm-up)")
        p("")
        rows = [("floor-ipc", "(a) raw ZeroMQ client, ipc (floor)"),
                ("floor-tcp", "(a) raw ZeroMQ client, tcp"),
                ("floor-own", "(a) raw ZeroMQ client on the daemon's own kernel"),
                ("kernelbridge", "(b) kernelbridge POST /run, http.client kept alive"),
                ("kernelbridge-rawhttp", "(b) same, one-write socket client (diagnostic)"),
                ("server:POST /run", "(b) as the daemon logs it (headers in → response out)"),
                ("health", "GET /health, http.client kept alive (empty HTTP baseline)"),
                ("server:GET /health", "GET /health as the daemon logs it"),
                ("jupyter_client", "(c) jupyter_client execute_interactive"),
                ("jupyter_server_ws", "(d) Jupyter Server kernel websocket"),
                ("jupyter_server_ws_nodelay", "(d) same, TCP_NODELAY set on the server's socket")]
        kernels = list(res["latency"])
        p("| client | " + " | ".join(f"{k} p50 | {k} p90 | {k} p99" for k in kernels) + " |")
        p("|---|" + "---:|" * (3 * len(kernels)))
        for key, label in rows:
            cells = []
            for k in kernels:
                L = res["latency"][k]
                s_ = L.get("server_log", {}).get(key[7:]) if key.startswith("server:") else L.get(key)
                cells += [us(s_["p50"]), us(s_["p90"]), us(s_["p99"])] if s_ else ["-"] * 3
            p(f"| {label} | " + " | ".join(cells) + " |")
        p("")
        for k in kernels:
            L = res["latency"][k]
            b, a = L["kernelbridge"]["p50"], L["floor-ipc"]["p50"]
            over = b - a
            own = L["kernelbridge"].get("paired_minus_floor-own")
            c, d = L["jupyter_client"]["p50"], L["jupyter_server_ws"]["p50"]
            dn = L.get("jupyter_server_ws_nodelay", {}).get("p50")
            p(f"- {k}: bridge overhead (b) p50 − (a) p50 = **{us(over)} µs** "
              f"(median of per-round differences vs floor-ipc: {us(L['kernelbridge']['paired_minus_floor-ipc'])} µs"
              + (f", vs the daemon's own kernel: {us(own)} µs" if own is not None else "")
              + f"). (c)/(b) = **{c / b:.2f}x**, (d)/(b) = **{d / b:.2f}x**"
              + (f" ({dn / b:.2f}x with TCP_NODELAY)" if dn else "")
              + f"; the floor itself is only {c / a:.2f}x below (c) and {d / a:.2f}x below (d)"
              + (f" ({dn / a:.2f}x with TCP_NODELAY)" if dn else "") + ".")
            verdicts.append((f"bridge overhead p50 ≤ 150 µs ({k}, interleaved)", over <= 150e-6, f"{us(over)} µs"))
            W = L.get("warm")
            if W and "paired_bridge_minus_own" in W:
                wo = W["paired_bridge_minus_own"]
                verdicts.append((f"bridge overhead p50 ≤ 150 µs ({k}, back-to-back, same kernel)",
                                 wo <= 150e-6, f"{us(wo)} µs"))
            verdicts.append((f"≥ 2x lower p50 than execute_interactive ({k})", c / b >= 2,
                             f"{c / b:.2f}x (a zero-cost bridge would be {c / a:.2f}x)"))
            verdicts.append((f"≥ 2x lower p50 than Jupyter Server websocket ({k})", d / b >= 2,
                             f"{d / b:.2f}x" + (f"; {dn / b:.2f}x vs the server with TCP_NODELAY" if dn else "")))
        p("")
        if any("warm" in res["latency"][k] for k in kernels):
            p(f"Back-to-back ({args.n_warm} rounds of bridge, floor on the same kernel process, /health; "
              "nothing else in between), and the daemon's CPU time per request "
              "(/proc/PID/task/*/schedstat, all threads):")
            p("")
            p("| kernel | bridge p50 | floor (own kernel) p50 | paired difference p50 | /health p50 "
              "| daemon CPU per /run | run slices per /run | daemon CPU per /health |")
            p("|---|---:|---:|---:|---:|---:|---:|---:|")
            for k in kernels:
                W = res["latency"][k].get("warm")
                if not W:
                    continue
                dr, dh = W["daemon_per_kernelbridge"], W["daemon_per_health"]
                p(f"| {k} | {us(W['kernelbridge']['p50'])} | {us(W['floor-own']['p50'])} | "
                  f"{us(W['paired_bridge_minus_own'])} | {us(W['health']['p50'])} | "
                  f"{dr['cpu_us']:,.0f} µs ({_threads(dr)}) | {dr['slices']:.1f} | {dh['cpu_us']:,.0f} µs |")
            p("")
    if "scaling" in res:
        S = res["scaling"]
        p(f"### 1b. Bridge cost with 1 and 20 contexts ({S['kernel']}, back-to-back, µs)")
        p("")
        p("| contexts on the daemon | bridge p50 | floor (own kernel) p50 | paired difference p50 "
          "| /health p50 | daemon CPU per /run | run slices per /run | daemon CPU per /health |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|")
        for n in ("1", "20"):
            W = S[n]
            dr, dh = W["daemon_per_kernelbridge"], W["daemon_per_health"]
            p(f"| {n} | {us(W['kernelbridge']['p50'])} | {us(W['floor-own']['p50'])} | "
              f"{us(W['paired_bridge_minus_own'])} | {us(W['health']['p50'])} | {dr['cpu_us']:,.0f} "
              f"({_threads(dr)}) | {dr['slices']:.1f} | {dh['cpu_us']:,.0f} |")
        p("")
    if "create" in res:
        p(f"### 2. Context creation, cold (ms; {args.create_rounds} interleaved rounds)")
        p("")
        p("Cold: a daemon with `--pool python=0`. Warm: a daemon with `--pool <kernel>=1`, each create "
          "after the pool has refilled.")
        p("")
        p("| kernel | kernelbridge POST /contexts, cold p50 | p90 | kernel's own start-up (raw client) p50 | p90 "
          "| jupyter_client start_new_kernel p50 | p90 | bridge cold / own (p50) | kernelbridge, warm pool p50 | p90 |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        notes = []
        for k, C in res["create"].items():
            ratio = C["kernelbridge"]["p50"] / C["floor"]["p50"]
            p(f"| {k} | {ms(C['kernelbridge']['p50'])} | {ms(C['kernelbridge']['p90'])} | "
              f"{ms(C['floor']['p50'])} | {ms(C['floor']['p90'])} | {ms(C['jupyter_client']['p50'])} | "
              f"{ms(C['jupyter_client']['p90'])} | {ratio:.3f} | "
              + (f"{ms(C['warm_pool']['p50'])} | {ms(C['warm_pool']['p90'])} |" if "warm_pool" in C else "- | - |"))
            if "warm_pool" in C:
                verdicts.append((f"warm-pool POST /contexts p50 ≤ 10 ms ({k})", C["warm_pool"]["p50"] <= 0.010,
                                 f"{ms(C['warm_pool']['p50'])} ms"))
            lag = C["floor"]["iopub_lag"]
            notes.append(f"- {k}: the raw client sent kernel_info_request {C['floor']['kernel_info_sent']} "
                         f"times per start (again every 20 ms while the reply had come but iopub was "
                         f"silent); iopub came {ms(lag['p50'])} ms (p50; max {ms(max(lag['min'], lag['p99']))}) "
                         f"after the first reply.")
            verdicts.append((f"cold POST /contexts within 10% of the kernel's start-up ({k})",
                             ratio <= 1.10, f"{(ratio - 1) * 100:+.1f}%"))
        p("")
        lines.extend(notes)
        p("")
    if "memory" in res:
        M = res["memory"]
        n = M["n_contexts"]
        idle = M["idle"]["VmRSS"]
        base = M["connections"]["VmRSS"]
        full = M["contexts"]["VmRSS"]
        per = (full - base) / n
        p("### 3. Daemon memory (KiB, /proc/PID/status)")
        p("")
        p("| state | VmRSS | RssAnon | RssFile | threads |")
        p("|---|---:|---:|---:|---:|")
        for key, label in (("idle_shipped", "as shipped (default `--pool python=1`), idle, pool ready"),
                           ("idle", "`--pool python=0`, idle, just started"),
                           ("connections", f"+ {M['n_connections']} kept-alive HTTP connections"),
                           ("contexts", f"+ {n} python3 contexts"),
                           ("contexts_after_run", "+ one `1+1` run on each"),
                           ("after_delete", "contexts deleted"),
                           ("contexts_2", f"{n} contexts created again"),
                           ("after_delete_2", "deleted again")):
            if key in M:
                s_ = M[key]
                p(f"| {label} | {s_['VmRSS']:,} | {s_['RssAnon']:,} | {s_['RssFile']:,} | {s_['Threads']} |")
        p("")
        roll = M["idle_rollup"]
        p(f"- idle: RSS {idle:,} KiB = file-backed (shared libraries) {M['idle']['RssFile']:,} KiB "
          f"+ anonymous {M['idle']['RssAnon']:,} KiB; PSS {roll.get('Pss', 0):,} KiB.")
        p("- largest resident mappings idle: "
          + ", ".join(f"{name} {kib:,}" for name, kib in M["idle_top_mappings"]) + " (KiB).")
        p(f"- per context: ({full:,} − {base:,}) / {n} = **{per:,.0f} KiB** "
          f"(anonymous: {(M['contexts']['RssAnon'] - M['connections']['RssAnon']) / n:,.0f} KiB); "
          f"after one run each: {(M['contexts_after_run']['VmRSS'] - base) / n:,.0f} KiB.")
        verdicts.append(("daemon RSS idle ≤ 10 MiB", idle <= 10 * 1024,
                         f"{idle / 1024:.1f} MiB, of which {M['idle']['RssFile'] / 1024:.1f} MiB shared "
                         f"libraries and {M['idle']['RssAnon'] / 1024:.1f} MiB anonymous"))
        verdicts.append(("≤ 100 KiB RSS per context", per <= 100, f"{per:,.0f} KiB"))
        p("")
    if "output" in res:
        out_lines, out_verdicts = output_report.report(res["output"])
        lines.extend(out_lines)
        verdicts.extend(out_verdicts)
    p("### Targets (SPEC §7)")
    p("")
    p("| target | met | measured |")
    p("|---|---|---|")
    for name, ok, val in verdicts:
        p(f"| {name} | {'n/a' if ok is None else ('yes' if ok else '**no**')} | {val} |")
    return "\n".join(lines)


def _threads(d):
    order = sorted(d["by_thread_us"].items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {v:,.0f}" for name, v in order if v >= 1)


# ---- main ----------------------------------------------------------------------------


def ensure_binary(path):
    if path:
        return path
    build = os.path.join(ROOT, "build")
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", ROOT, "-B", build], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j2", "--target", "kernelbridge_cli"], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(build, "kernelbridge")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer samples; under ~2 minutes")
    ap.add_argument("--sections", help="comma-separated subset of latency,scaling,create,memory,"
                    "output (default: all; --quick leaves out scaling)")
    ap.add_argument("--kernels", default="python3,xpython", help="kernelspecs for latency and create")
    ap.add_argument("--binary", help="kernelbridge binary (default: build it in ./build)")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="first wait up to S seconds for the machine to be >= 90%% idle")
    ap.add_argument("-n", type=int, help="latency rounds (default 1000, quick 200)")
    args = ap.parse_args()
    args.kernels = args.kernels.split(",")
    sections = (args.sections or ("latency,create,memory,output" if args.quick else
                                  "latency,scaling,create,memory,output")).split(",")
    args.n = args.n or (200 if args.quick else 1000)
    args.warmup = 20 if args.quick else 50
    args.create_rounds = 4 if args.quick else 10
    args.warm_create_rounds = 10 if args.quick else 30
    args.mem_contexts = 20
    args.mem_threads = 4
    args.output_rounds = 1 if args.quick else 3
    args.n_warm = 100 if args.quick else 300
    args.mem_cycles = 1 if args.quick else 2

    tmp = tempfile.mkdtemp(prefix="kbb", dir="/tmp")  # short: ipc path limits
    CLEANUPS.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
    # every kernel (the daemon's and the peers') gets the same private dirs
    private_environment(tmp, drop_kb=False)
    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(130))

    binary = ensure_binary(args.binary)
    t_start = time.perf_counter()
    res = {"env": environment(binary, ROOT), "quick": args.quick}
    res["idle_before"] = wait_quiet(args.wait_quiet, retry_window=5.0)
    res["loadavg_before"] = loadavg()
    probe = peers.Daemon(binary, os.path.join(tmp, "probe"), NO_POOL)
    res["version"] = probe.http.json("GET", "/health")["version"]
    probe.stop()

    if "latency" in sections:
        server = peers.JupyterServer(os.path.join(tmp, "jupyter-server"))
        CLEANUPS.append(server.stop)
        res["latency"] = section_latency(args, tmp, binary, server)
        server.stop()
        CLEANUPS.remove(server.stop)
    if "scaling" in sections:
        res["scaling"] = section_scaling(args, tmp, binary)
    if "create" in sections:
        res["create"] = section_create(args, tmp, binary)
    if "memory" in sections:
        res["memory"] = section_memory(args, tmp, binary)
    if "output" in sections:
        res["output"] = section_output(args, tmp, binary)
    res["elapsed_s"] = time.perf_counter() - t_start
    res["loadavg_after"] = loadavg()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    print(report(res, args))
    print(f"\n(elapsed {res['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
