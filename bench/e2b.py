#!/usr/bin/python3
"""The E2B front end against the native API and against Jupyter Server.

    /usr/bin/python3 bench/e2b.py [-n N] [--binary PATH] [--results PATH] [--json FILE]

One `kernelbridge serve --e2b-listen` (loopback, ephemeral ports, private
state dir, no warm pool, Deno's kernelspec from .cache/deno/jupyter so that
the default JavaScript context exists as it would for E2B's SDKs) and one
Jupyter Server, side by side in one run:

  latency  `1+1` on ipykernel, N rounds after a warm-up, each round running
           every contender once in a shuffled order:
           - E2B  `POST /execute {"code": "1+1"}` on the E2B listener (the
             default context), the NDJSON stream read to end_of_execution;
           - native `POST /run {"code": "1+1", "context_id": "default-python"}`;
           - Jupyter Server's kernel websocket (/api/kernels/{id}/channels):
             execute_request until execute_reply and iopub idle, the layer
             E2B's own server sits on; as shipped, and with TCP_NODELAY set
             on the server's socket (kbbench/jupyter_server_launch.py; as
             shipped, Nagle's algorithm adds ~40 ms to each round trip).
           Each HTTP client keeps its connection alive.
  memory   the daemon's VmRSS once it listens (its two default contexts,
           Python and JavaScript, are started before that), after the
           latency rounds, and its kernels' RSS; Jupyter Server's VmRSS with
           the same two kernels started and after its rounds.

Every output line of every round is checked (a wrong answer stops the run).
Prints the tables and the targets table; saves bench/results/e2b.json.
Every process started is stopped at the end.
"""

import argparse
import json
import os
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, peers, procs  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402
from kbbench.httpclient import Http  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct  # noqa: E402

DENO_JUPYTER = os.path.join(cli.ROOT, ".cache", "deno", "jupyter")
START_TIMEOUT_S = 60  # the daemon's E2B listener up


def e2b_once(http):
    t0 = time.perf_counter()
    status, data = http.request("POST", "/execute", {"code": "1+1"})
    dt = time.perf_counter() - t0
    lines = [json.loads(line) for line in data.splitlines()]
    kinds = [line["type"] for line in lines]
    if status != 200 or kinds[-1] != "end_of_execution" or not any(
            line.get("text") == "2" for line in lines if line["type"] == "result"):
        raise RuntimeError(f"E2B /execute: {status} {data[:500]!r}")
    return dt


def native_once(http):
    t0 = time.perf_counter()
    status, data = http.request("POST", "/run", {"code": "1+1", "context_id": "default-python"})
    dt = time.perf_counter() - t0
    result = json.loads(data)
    if status != 200 or [r.get("text") for r in result["results"]] != ["2"]:
        raise RuntimeError(f"POST /run: {status} {data[:500]!r}")
    return dt


def rss_kib(pid):
    return procs.proc_status(pid)["VmRSS"]


def start_daemon(binary: str, tmp: str, res: dict[str, Any]) -> tuple[Daemon, Http]:
    """The daemon with its E2B listener and its two default contexts started."""
    e2b_port_file = os.path.join(tmp, "daemon", "e2b-port")
    t0 = time.perf_counter()
    daemon = Daemon(binary, os.path.join(tmp, "daemon"),
                    (*NO_POOL, "--e2b-listen", "127.0.0.1:0", "--e2b-port-file", e2b_port_file))
    while not os.path.exists(e2b_port_file):
        if time.perf_counter() - t0 > START_TIMEOUT_S:
            raise RuntimeError("no E2B listener: " + daemon.tail())
        time.sleep(0.01)
    with open(e2b_port_file) as f:
        e2b = Http(int(f.read().strip()))
    contexts = daemon.http.json("GET", "/contexts?all=true")["contexts"]
    languages = sorted(c["language"] for c in contexts)
    if languages != ["javascript", "python"]:
        raise RuntimeError(f"default contexts: {contexts}")
    res["daemon_start_s"] = time.perf_counter() - t0
    res["daemon_rss_kib_ready"] = rss_kib(daemon.pid)
    res["daemon_kernels_rss_kib"] = sum(rss_kib(c["pid"]) for c in contexts)
    return daemon, e2b


def measure(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    res: dict[str, Any] = {"rounds": args.n}
    daemon, e2b = start_daemon(args.binary, tmp, res)
    server = peers.JupyterServer(os.path.join(tmp, "jupyter-server"))
    kernel_ids = [server.start_kernel("python3"), server.start_kernel("deno")]
    ws = server.websocket(kernel_ids[0])
    ws_nodelay = server.websocket(kernel_ids[0], nodelay=True)
    ws.execute("1+1")  # the kernel is up and answering
    res["server_rss_kib_ready"] = rss_kib(server.proc.pid)
    native = Http(daemon.port)
    contenders = {
        "E2B POST /execute": lambda: e2b_once(e2b),
        "native POST /run": lambda: native_once(native),
        "Jupyter Server websocket": lambda: ws.execute("1+1"),
        "Jupyter Server websocket, TCP_NODELAY": lambda: ws_nodelay.execute("1+1"),
    }
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    rng = random.Random(args.seed)
    cli.log(f"{args.warmup} warm-up and {args.n} measured rounds of 1+1 ...")
    for i in range(args.warmup + args.n):
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            dt = contenders[name]()
            if i >= args.warmup:
                samples[name].append(dt)
    res["daemon_rss_kib_after"] = rss_kib(daemon.pid)
    res["server_rss_kib_after"] = rss_kib(server.proc.pid)
    res["latency_s"] = {name: {"p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99)}
                        for name, xs in samples.items()}
    for closer in (ws.close, ws_nodelay.close, *(lambda k=k: server.shutdown_kernel(k)
                                                  for k in kernel_ids), server.stop, e2b.close,
                   native.close, daemon.stop):
        closer()
    return res


def figures(res: dict[str, Any]) -> Figures:
    lat = res["latency_s"]
    e2b = lat["E2B POST /execute"]["p50"]
    mib = 1 / 1024
    return {
        "ws_shipped_ratio": figure("websocket as shipped ÷ E2B /execute",
                                   lat["Jupyter Server websocket"]["p50"] / e2b, "x"),
        "ws_nodelay_ratio": figure("Jupyter Server websocket with TCP_NODELAY p50 ÷ E2B /execute p50",
                                   lat["Jupyter Server websocket, TCP_NODELAY"]["p50"] / e2b, "x"),
        "execute_vs_run_ratio": figure("E2B POST /execute p50 ÷ native POST /run p50",
                                       e2b / lat["native POST /run"]["p50"], "x"),
        "execute_ms": figure("E2B POST /execute p50", e2b * 1e3, "ms"),
        "daemon_rss_ready_mib": figure("daemon VmRSS, 2 default contexts, ready",
                                       res["daemon_rss_kib_ready"] * mib, "MiB"),
        "server_rss_ready_mib": figure("Jupyter Server VmRSS, the same 2 kernels, ready",
                                       res["server_rss_kib_ready"] * mib, "MiB"),
    }


def tables(res: dict[str, Any]) -> list[str]:
    lat = res["latency_s"]
    base = lat["native POST /run"]["p50"]
    lines = [f"`1+1` on ipykernel, {res['rounds']} interleaved rounds (ms)", "",
             "| contender | p50 | p90 | p99 | p50 vs native |", "|---|---:|---:|---:|---:|"]
    for name, s in lat.items():
        lines.append(f"| {name} | {s['p50'] * 1e3:.2f} | {s['p90'] * 1e3:.2f} | "
                     f"{s['p99'] * 1e3:.2f} | {s['p50'] / base:.2f}x |")
    e2b_p50 = lat["E2B POST /execute"]["p50"]
    for name in ("Jupyter Server websocket", "Jupyter Server websocket, TCP_NODELAY"):
        lines += ["", f"E2B front end vs {name}, p50: {lat[name]['p50'] / e2b_p50:.2f}x faster"]
    mib = lambda kib: f"{kib / 1024:.1f}"  # noqa: E731
    lines += ["", "| resident memory (MiB) | ready | after the rounds |", "|---|---:|---:|",
              f"| kernelbridge daemon, 2 default contexts (python, javascript) "
              f"| {mib(res['daemon_rss_kib_ready'])} | {mib(res['daemon_rss_kib_after'])} |",
              f"| Jupyter Server, the same 2 kernels "
              f"| {mib(res['server_rss_kib_ready'])} | {mib(res['server_rss_kib_after'])} |",
              f"| the daemon's 2 kernels (ipykernel + Deno), not counted above "
              f"| {mib(res['daemon_kernels_rss_kib'])} | |"]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500, help="latency rounds (default 500)")
    ap.add_argument("--warmup", type=int, default=30)
    cli.add_common(ap)
    args = ap.parse_args()
    args.binary = cli.check_binary(args.binary)
    if not os.path.isfile(os.path.join(DENO_JUPYTER, "kernels", "deno", "kernel.json")):
        sys.exit(f"{DENO_JUPYTER} has no deno kernelspec: run scripts/setup.sh first")
    tmp = cli.setup("kbe")
    os.environ["JUPYTER_PATH"] = DENO_JUPYTER  # both the daemon and Jupyter Server see Deno
    env = machine.environment(args.binary, cli.ROOT)
    res = measure(args, tmp)
    print("\n".join(tables(res)))
    cli.finish(args, "e2b", res, figures(res), env)


if __name__ == "__main__":
    main()
