#!/usr/bin/python3
"""Jupyter's kernel websocket: kernelbridge's against Jupyter Server's, and
against kernelbridge's own POST /run on the same kernel (SPEC sections 7, 10).

    /usr/bin/python3 bench/jupyter_ws.py [-n 400] [--binary PATH] [--results PATH] [--json FILE]

One `kernelbridge serve` (loopback, ephemeral port, private state dir, no
warm pool) and one Jupyter Server 1.x (kbbench/jupyter_server_launch.py:
as shipped, and per connection with TCP_NODELAY on the server's socket).
Every kernel is python3 (ipykernel). `1+1`, N rounds after a warm-up, each
round running every contender once in a shuffled order:

  kb-ws-legacy   kernelbridge /api/kernels/{id}/channels, legacy JSON
                 framing (text frames), on kernel K1 (POST /api/kernels)
  kb-ws-v1       the same in the v1.kernel.websocket.jupyter.org
                 subprotocol (binary frames), on kernel K2
  kb-run-K1      POST /run {"context_id": K1} over a kept-alive http.client
  kb-run-K2      the same on K2 (a kernel of /api/kernels is a context)
  kb-run-alone   the same on a third kernel with no websocket attached (a
                 diagnostic: what the iopub fan-out to an idle websocket costs)
  js-ws          Jupyter Server's kernel websocket as shipped (legacy JSON)
  js-ws-nodelay  the same with TCP_NODELAY on the server's socket
  floor          kbbench/raw.py's minimal pyzmq client on a kernel of its own (ipc)

A websocket execute is timed from sending the execute_request to having
both its execute_reply and the iopub `status: idle` whose parent is that
request (the result checked to be `2`); POST /run until its answer is
parsed. Every websocket client is websocket-client with TCP_NODELAY set on
its socket (sockopt; checked) and UTF-8 validation of text frames off (its
pure-Python validator would otherwise be the largest cost of a legacy
frame, on either server). A kernel's iopub goes to every websocket on it,
so what another contender's run left on a websocket is read, untimed,
before its next execute. Each websocket has its kernel to itself but for
the POST /run of the same kernel, so that the websocket's overhead is the
paired difference ws − run on one kernel process.

Then, back to back on the daemon alone, its CPU per execute for each
kernelbridge contender (/proc/PID/task/*/schedstat, all threads).

Prints Markdown tables (µs) with the ratios and the targets table
(bench/targets.py; saves bench/results/jupyter.json):
kernelbridge's websocket p50 at least 5x lower than Jupyter Server's as
shipped, at least 1.3x lower than with TCP_NODELAY, and at most 100 µs over
POST /run on the same kernel. Everything listens on 127.0.0.1 with
ephemeral ports in a private temporary directory; every process started is
stopped at the end, also on error or Ctrl-C.
"""

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kbbench import cli, machine, peers, procs, raw  # noqa: E402
from kbbench.calls import run_once  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402
from kbbench.httpclient import Http  # noqa: E402
from kbbench.machine import IdleMeter, loadavg, wait_quiet  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import interleave, pct, summary, us  # noqa: E402
from kbbench.wsclient import CODE, WsKernel  # noqa: E402

NAGLE_S = 0.035  # a round of Jupyter Server as shipped this slow waited for a delayed ACK
FRAGILE = (0.3, 0.7)  # a share of slow rounds in here puts its p50 between the two modes
BUSY = 0.5  # CPUs idle less than this during the rounds: other work moves the figures


# ---- the rounds -------------------------------------------------------------------


def daemon_cpu(contenders, daemon, names, n):
    """The daemon's CPU (all threads, schedstat) per execute, back to back."""
    out = {}
    for k in names:
        for _ in range(20):
            contenders[k]()
        before = procs.schedstat(daemon.pid)
        t0 = time.perf_counter()
        for _ in range(n):
            contenders[k]()
        wall = time.perf_counter() - t0
        out[k] = dict(procs.per_request(before, procs.schedstat(daemon.pid), n), wall_us=wall / n * 1e6)
    return out


def kill_leftovers(prefix):
    """SIGKILL every process whose command line names a file under prefix
    (kernels of a server that did not stop them)."""
    procs.kill_groups(procs.pids_naming(prefix))


def start(binary: str, tmp: str, closers: list[Callable[[], Any]]) -> dict[str, Callable[[], float]]:
    """The daemon, Jupyter Server, their kernels and every contender's client."""
    daemon = Daemon(binary, os.path.join(tmp, "daemon"), NO_POOL)
    closers += [daemon.stop, daemon.kill_processes_left]
    server = peers.JupyterServer(os.path.join(tmp, "jupyter-server"))
    closers += [server.stop, lambda: kill_leftovers(os.path.join(tmp, "jupyter-server"))]
    kb = {}
    for name in ("K1", "K2", "alone"):
        kb[name] = daemon.http.json("POST", "/api/kernels", {"name": "python3"}, expect=(201,))["id"]
        closers.append(lambda kid=kb[name]: daemon.http.json(
            "DELETE", f"/api/kernels/{kid}", expect=(204, 404)))
    js = {name: server.start_kernel("python3") for name in ("shipped", "nodelay")}
    for kid in js.values():
        closers.append(lambda kid=kid: server.shutdown_kernel(kid))
    floor = raw.RawKernel("python3", os.path.join(tmp, "floor"), "ipc").start()
    closers.append(floor.shutdown)
    ws = {"kb-ws-legacy": WsKernel(daemon.port, kb["K1"]),
          "kb-ws-v1": WsKernel(daemon.port, kb["K2"], v1=True),
          "js-ws": WsKernel(server.port, js["shipped"], token=server.token),
          "js-ws-nodelay": WsKernel(server.port, js["nodelay"], token=server.token, nodelay_server=True)}
    closers += [w.close for w in ws.values()]
    runs = {}
    for name in ("K1", "K2", "alone"):
        h = Http(daemon.port)
        closers.append(h.close)
        runs[name] = (h, json.dumps({"code": CODE, "context_id": kb[name]}).encode())

    def raw_once():
        dt, _, status = floor.execute(CODE)
        if status != "ok":
            raise RuntimeError(f"raw run: {status}")
        return dt

    contenders: dict[str, Any] = {k: ws[k].execute for k in ("kb-ws-legacy", "kb-ws-v1")}
    contenders.update({f"kb-run-{name}": lambda r=runs[name]: run_once(*r) for name in runs})
    contenders.update({k: ws[k].execute for k in ("js-ws", "js-ws-nodelay")})
    contenders["floor"] = raw_once
    contenders["_daemon"], contenders["_ws"] = daemon, ws
    return contenders


def measure(args, tmp):
    res = {"rounds": args.n, "warmup": args.warmup}
    cli.log(f"waiting up to {args.wait_quiet:.0f} s for the CPUs to be 90% idle ...")
    res["idle_before"] = wait_quiet(args.wait_quiet, retry_window=5.0)
    res["loadavg_before"] = loadavg()
    closers: list[Callable[[], Any]] = []
    try:
        contenders = start(args.binary, tmp, closers)
        daemon, ws = contenders.pop("_daemon"), contenders.pop("_ws")
        res["version"] = daemon.http.json("GET", "/health")["version"]
        if args.no_floor:
            del contenders["floor"]
        cli.log(f"{args.warmup} warm-up and {args.n} measured rounds of {len(contenders)} contenders ...")
        meter, la0, t0 = IdleMeter(), loadavg(), time.perf_counter()
        samples = interleave(contenders, args.warmup, args.n, args.seed)
        res["rounds_s"] = time.perf_counter() - t0
        res["idle_rounds"] = meter.stop()
        res["loadavg_rounds"] = [la0, loadavg()]
        res["latency"] = {k: summary(v) for k, v in samples.items()}
        res["paired"] = {f"{a} - {b}": pct([x - y for x, y in zip(samples[a], samples[b])], 50)
                         for a, b in (("kb-ws-legacy", "kb-run-K1"), ("kb-ws-v1", "kb-run-K2"),
                                      ("kb-run-K1", "kb-run-alone"))}
        # Jupyter Server as shipped is bimodal: a round either waits for the
        # client's delayed ACK (40 ms; Nagle) or, when the server was late
        # enough to write the kernel's messages together, does not
        res["js_ws_nagle_share"] = sum(x >= NAGLE_S for x in samples["js-ws"]) / len(samples["js-ws"])
        res["drained"] = {k: w.drained for k, w in ws.items()}
        if args.samples:
            res["samples"] = samples
        if args.cpu_n:
            cli.log(f"daemon CPU: {args.cpu_n} back-to-back executes per kernelbridge contender ...")
            meter = IdleMeter()
            res["daemon_cpu"] = daemon_cpu(contenders, daemon, ("kb-ws-legacy", "kb-ws-v1",
                                                                "kb-run-K1", "kb-run-alone"), args.cpu_n)
            res["idle_cpu_phase"] = meter.stop()
        res["loadavg_after"] = loadavg()
        res["daemon_rss_kib"] = procs.proc_status(daemon.pid)["VmRSS"]
    finally:
        for fn in reversed(closers):
            try:
                fn()
            except Exception as e:  # keep stopping the rest
                cli.log(f"cleanup: {e}")
    return res


def figures(res: dict[str, Any]) -> Figures:
    L = res["latency"]
    shipped, nodelay = L["js-ws"]["p50"], L["js-ws-nodelay"]["p50"]
    out: Figures = {}
    for ws, run, name in WS:
        b = L[ws]["p50"]
        out[f"{name}.shipped_ratio"] = figure(f"{name}: as shipped ÷ websocket", shipped / b, "x")
        out[f"{name}.nodelay_ratio"] = figure(f"{name}: TCP_NODELAY ÷ websocket", nodelay / b, "x")
        out[f"{name}.over_run_us"] = figure(f"{name}: over POST /run", (b - L[run]["p50"]) * 1e6, "µs")
        out[f"{name}.over_run_paired_us"] = figure(f"{name}: over POST /run, paired",
                                                   res["paired"][f"{ws} - {run}"] * 1e6, "µs")
    if "floor" in L:
        out["floor.nodelay_ratio"] = figure("the floor: Jupyter Server with TCP_NODELAY p50 ÷ "
                                            "raw floor p50", nodelay / L["floor"]["p50"], "x")
    out["js_ws_nagle_share"] = figure("Jupyter Server as shipped: share of rounds of 35 ms or more",
                                      res["js_ws_nagle_share"], "share")
    return out


# ---- report ---------------------------------------------------------------------


ROWS = (("kb-ws-legacy", "(a) kernelbridge websocket, legacy JSON framing (K1)"),
        ("kb-ws-v1", "(b) kernelbridge websocket, v1 subprotocol (K2)"),
        ("kb-run-K1", "(c) kernelbridge POST /run on K1, http.client kept alive"),
        ("kb-run-K2", "(c) same on K2"),
        ("kb-run-alone", "(c') same on a kernel with no websocket attached"),
        ("js-ws", "(d) Jupyter Server websocket, as shipped"),
        ("js-ws-nodelay", "(e) Jupyter Server websocket, TCP_NODELAY on the server's socket"),
        ("floor", "(f) raw ZeroMQ client, own kernel, ipc (floor)"))
WS = (("kb-ws-legacy", "kb-run-K1", "legacy"), ("kb-ws-v1", "kb-run-K2", "v1"))


def report(res, env):
    lines = []
    p = lines.append
    L = res["latency"]
    p(f"Machine: {env['nproc']} CPUs ({env['cpu']}), {env['mem_gib']} GiB, Linux {env['kernel']}, "
      f"Python {env['python']}; kernelbridge {res.get('version', '?')} ({env['binary']}; "
      f"checkout at {env['commit']}); jupyter-server {env['packages'].get('python3-jupyter-server')}, "
      f"websocket-client {env['packages'].get('python3-websocket')}.")
    p("")
    p(f"### `1+1` on python3 (ipykernel), µs; {res['rounds']} interleaved rounds in shuffled order "
      f"after {res['warmup']} warm-up; CPUs {100 * res['idle_before']:.0f}% idle before, "
      f"{100 * res['idle_rounds']:.0f}% idle during the rounds; load average "
      f"{res['loadavg_before']} before, {res['loadavg_rounds'][1]} after the rounds")
    p("")
    shipped, nodelay = L["js-ws"]["p50"], L["js-ws-nodelay"]["p50"]
    p("| contender | p50 | p90 | p99 | (d) p50 ÷ this | (e) p50 ÷ this | this − POST /run, same kernel (p50 / paired) |")
    p("|---|---:|---:|---:|---:|---:|---:|")
    for key, label in ROWS:
        s = L.get(key)
        if not s:
            continue
        over = "-"
        for ws, run, _ in WS:
            if key == ws:
                paired = res["paired"][f"{ws} - {run}"]
                over = f"{us(s['p50'] - L[run]['p50'])} / {us(paired)}"
        p(f"| {label} | {us(s['p50'])} | {us(s['p90'])} | {us(s['p99'])} | "
          f"{shipped / s['p50']:.2f}x | {nodelay / s['p50']:.2f}x | {over} |")
    p("")
    p(f"- The fan-out: POST /run on K1 (one idle websocket attached) − POST /run on a kernel with none, "
      f"paired p50: {us(res['paired']['kb-run-K1 - kb-run-alone'])} µs. Messages of other runs read "
      f"(untimed) before an execute: " + ", ".join(f"{k} {v}" for k, v in res["drained"].items()) + ".")
    share = res["js_ws_nagle_share"]
    p(f"- Jupyter Server as shipped: {100 * share:.0f}% of its rounds took {NAGLE_S * 1e3:.0f} ms or more "
      "(a frame waiting for the client's delayed ACK, Nagle's algorithm being on); the others did not "
      "wait (presumably the server, late on a busy machine, wrote the kernel's messages together)."
      + (" Its p50 lies between the two modes, so the ratios to (d) are fragile: a few rounds more in "
         "the fast mode would move them a lot." if FRAGILE[0] <= share <= FRAGILE[1] else ""))
    if res["idle_rounds"] < BUSY:
        p(f"- The CPUs were only {100 * res['idle_rounds']:.0f}% idle during the rounds: other work on "
          "the machine moves the absolute figures; the rounds are interleaved, so the ratios hold better.")
    C = res.get("daemon_cpu")
    if C:
        p("")
        p(f"Back to back ({res.get('cpu_n')} executes each), the daemon's CPU per execute "
          f"(/proc/PID/task/*/schedstat, all threads; CPUs {100 * res['idle_cpu_phase']:.0f}% idle):")
        p("")
        p("| contender | wall per execute (µs) | daemon CPU per execute (µs) | run slices | by thread (µs) |")
        p("|---|---:|---:|---:|---|")
        for k, c in C.items():
            threads = ", ".join(f"{t} {v:,.0f}" for t, v in sorted(c["by_thread_us"].items(), key=lambda kv: -kv[1])
                                if v >= 1)
            p(f"| {k} | {c['wall_us']:,.0f} | {c['cpu_us']:,.0f} | {c['slices']:.1f} | {threads} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=400, help="measured rounds (default 400)")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--wait-quiet", type=float, default=180, metavar="S",
                    help="first wait up to S seconds for the CPUs to be >= 90%% idle (default 180)")
    ap.add_argument("--cpu-n", type=int, default=300,
                    help="back-to-back executes per contender for the daemon's CPU (0: skip)")
    ap.add_argument("--no-floor", action="store_true", help="leave out the raw ZeroMQ floor")
    ap.add_argument("--samples", action="store_true", help="keep every sample in --json")
    cli.add_common(ap)
    args = ap.parse_args()
    args.binary = cli.check_binary(args.binary)
    tmp = cli.setup("kbw")
    env = machine.environment(args.binary, cli.ROOT)
    res = measure(args, tmp)
    res["cpu_n"] = args.cpu_n
    print(report(res, env))
    cli.finish(args, "jupyter", res, figures(res), env)


if __name__ == "__main__":
    main()
