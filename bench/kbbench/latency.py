"""Latency: `1+1` round trips of kernelbridge against its floor and its peers,
interleaved in shuffled rounds on the same kernelspecs (SPEC section 7,
"Bridge overhead" and "Versus peers").

For each kernelspec, every contender once a round, in a shuffled order:
(a) the floor, kbbench/raw.py's minimal pyzmq client, over ipc and tcp on
kernels of its own and attached to the daemon's own kernel process;
(b) kernelbridge `POST /run` over a kept-alive http.client connection (and,
as a diagnostic, a one-write socket client; `GET /health` as the empty
HTTP round trip; the daemon's own request log); (c) jupyter_client's
`execute_interactive`; (d) Jupyter Server's kernel websocket as shipped and
with TCP_NODELAY on the server's socket.

Not for: back-to-back overhead and the daemon's CPU and memory
(overhead.py), context creation (pool.py).
"""

import json
import os
from typing import Any, Callable

from . import peers, procs, raw
from .calls import health_once, run_once
from .daemon import Daemon
from .httpclient import Http, RawHttp
from .results import Figures, figure
from .stats import interleave, pct, summary, us

CODE = "1+1"


def raw_once(client: raw.RawClient) -> float:
    dt, _, status = client.execute(CODE)
    if status != "ok":
        raise RuntimeError(f"raw run: {status}")
    return dt


def measure(binary: str, tmp: str, kernels: list[str], n: int, warmup: int, seed: int,
            log: Callable[..., None]) -> dict[str, Any]:
    """{kernel: {contender: summary, ..., "server_log": ...}} for each kernelspec."""
    out: dict[str, Any] = {}
    server = peers.JupyterServer(os.path.join(tmp, "jupyter-server"))
    daemon = Daemon(binary, os.path.join(tmp, "lat-daemon"))
    try:
        for kname in kernels:
            log(f"latency: {kname}: starting kernels")
            kdir = os.path.join(tmp, f"lat-{kname}")
            os.makedirs(kdir)
            closers: list[Callable[[], Any]] = []
            try:
                clients = contenders(kname, kdir, daemon, server, closers)
                out[kname] = rounds(clients, daemon, n, warmup, seed)
            finally:
                for fn in reversed(closers):
                    try:
                        fn()
                    except Exception as e:
                        log(f"latency cleanup: {e}")
    finally:
        daemon.stop()
        server.stop()
    return out


def contenders(kname: str, kdir: str, daemon: Daemon, server: peers.JupyterServer,
               closers: list[Callable[[], Any]]) -> dict[str, Callable[[], float]]:
    """Start every contender on kernelspec kname; their closers appended."""
    clients: dict[str, Callable[[], float]] = {}
    for transport in ("ipc", "tcp"):  # (a) the floor, ipc (the daemon's default) and tcp
        rk = raw.RawKernel(kname, os.path.join(kdir, f"raw-{transport}"), transport).start()
        closers.append(rk.shutdown)
        assert rk.client is not None
        clients[f"floor-{transport}"] = lambda c=rk.client: raw_once(c)
    # (b) kernelbridge over HTTP, kept alive, pre-created context
    ctx, conn_file, _ = daemon.create_context(kernel_name=kname)
    closers.append(lambda: daemon.delete_context(ctx))
    daemon.wait_pool_settled()  # a taken pooled kernel is replaced in the background
    body = json.dumps({"code": CODE, "context_id": ctx["context_id"]}).encode()
    bridge_http = Http(daemon.port)
    closers.append(bridge_http.close)
    clients["kernelbridge"] = lambda: run_once(bridge_http, body)
    if conn_file:  # (a') the floor on the daemon's own kernel process
        own = raw.attach(conn_file)
        closers.append(own.close)
        clients["floor-own"] = lambda: raw_once(own)
    # diagnostics: empty HTTP round trip; a one-write HTTP client
    health_http = Http(daemon.port)
    closers.append(health_http.close)
    clients["health"] = lambda: health_once(health_http)
    rh = RawHttp(daemon.port)
    closers.append(rh.close)
    clients["kernelbridge-rawhttp"] = lambda: run_once(rh, body)
    # (c) jupyter_client execute_interactive
    jck = peers.JupyterClientKernel(kname, os.path.join(kdir, "jc"))
    closers.append(jck.shutdown)
    clients["jupyter_client"] = lambda: jck.execute(CODE)
    # (d) Jupyter Server's kernel websocket, as shipped and with TCP_NODELAY
    for key, nodelay in (("jupyter_server_ws", False), ("jupyter_server_ws_nodelay", True)):
        kid = server.start_kernel(kname)
        closers.append(lambda kid=kid: server.shutdown_kernel(kid))
        ws = server.websocket(kid, nodelay=nodelay)
        closers.append(ws.close)
        clients[key] = lambda w=ws: w.execute(CODE)
    daemon.wait_pool_settled()
    return clients


def rounds(clients: dict[str, Callable[[], float]], daemon: Daemon, n: int, warmup: int,
           seed: int) -> dict[str, Any]:
    """Warm-up, then n interleaved rounds; summaries, paired differences and
    the daemon's own view of the same requests (its request log)."""
    for _ in range(warmup):
        for fn in clients.values():
            fn()
    log_from = os.path.getsize(daemon.log_path)
    samples = interleave(clients, 0, n, seed)
    res: dict[str, Any] = {k: summary(v) for k, v in samples.items()}
    # paired (same round) differences: robust to slow drift of the machine
    for k in ("kernelbridge", "kernelbridge-rawhttp"):
        for base in ("floor-ipc", "floor-own"):
            if k in samples and base in samples:
                diffs = [a - b for a, b in zip(samples[k], samples[base])]
                res[k][f"paired_minus_{base}"] = pct(diffs, 50)
    with open(daemon.log_path, "rb") as f:
        f.seek(log_from)
        server_times = procs.request_log_times(f.read().decode(errors="replace"))
    res["server_log"] = {k: summary(v) for k, v in server_times.items() if v}
    return res


def figures(details: dict[str, Any]) -> Figures:
    out: Figures = {}
    for k, L in details["kernels"].items():
        b, a = L["kernelbridge"]["p50"], L["floor-ipc"]["p50"]
        c, d = L["jupyter_client"]["p50"], L["jupyter_server_ws"]["p50"]
        dn = L["jupyter_server_ws_nodelay"]["p50"]
        out[f"{k}.overhead_us"] = figure(f"{k}: bridge overhead p50, interleaved", (b - a) * 1e6, "µs")
        out[f"{k}.ws_shipped_ratio"] = figure(f"{k}: websocket as shipped ÷ POST /run", d / b, "x")
        out[f"{k}.floor_us"] = figure(f"{k}: raw floor p50 (ipc)", a * 1e6, "µs")
        out[f"{k}.bridge_us"] = figure(f"{k}: POST /run p50", b * 1e6, "µs")
        out[f"{k}.paired_overhead_us"] = figure(
            f"{k}: POST /run − floor, median of per-round differences",
            L["kernelbridge"]["paired_minus_floor-ipc"] * 1e6, "µs")
        out[f"{k}.bridge_to_floor_ratio"] = figure(f"{k}: POST /run p50 ÷ floor p50", b / a, "x")
        out[f"{k}.jupyter_client_ratio"] = figure(
            f"{k}: jupyter_client execute_interactive p50 ÷ POST /run p50", c / b, "x")
        out[f"{k}.jupyter_client_floor_ratio"] = figure(
            f"{k}: jupyter_client p50 ÷ floor p50 (a zero-cost bridge's ratio)", c / a, "x")
        out[f"{k}.ws_nodelay_ratio"] = figure(
            f"{k}: websocket with TCP_NODELAY ÷ POST /run", dn / b, "x")
    return out


ROWS = (("floor-ipc", "(a) raw ZeroMQ client, ipc (floor)"),
        ("floor-tcp", "(a) raw ZeroMQ client, tcp"),
        ("floor-own", "(a) raw ZeroMQ client on the daemon's own kernel"),
        ("kernelbridge", "(b) kernelbridge POST /run, http.client kept alive"),
        ("kernelbridge-rawhttp", "(b) same, one-write socket client (diagnostic)"),
        ("server:POST /run", "(b) as the daemon logs it (headers in → response out)"),
        ("health", "GET /health, http.client kept alive (empty HTTP baseline)"),
        ("server:GET /health", "GET /health as the daemon logs it"),
        ("jupyter_client", "(c) jupyter_client execute_interactive"),
        ("jupyter_server_ws", "(d) Jupyter Server kernel websocket"),
        ("jupyter_server_ws_nodelay", "(d) same, TCP_NODELAY set on the server's socket"))


def tables(details: dict[str, Any]) -> list[str]:
    lines = [f"### `1+1` latency (µs; {details['n']} interleaved rounds in shuffled order, "
             f"after {details['warmup']} warm-up)", ""]
    kernels = list(details["kernels"])
    lines.append("| client | " + " | ".join(f"{k} p50 | {k} p90 | {k} p99" for k in kernels) + " |")
    lines.append("|---|" + "---:|" * (3 * len(kernels)))
    for key, label in ROWS:
        cells = []
        for k in kernels:
            L = details["kernels"][k]
            s = L.get("server_log", {}).get(key[7:]) if key.startswith("server:") else L.get(key)
            cells += [us(s["p50"]), us(s["p90"]), us(s["p99"])] if s else ["-"] * 3
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for k in kernels:
        L = details["kernels"][k]
        b, a = L["kernelbridge"]["p50"], L["floor-ipc"]["p50"]
        own = L["kernelbridge"].get("paired_minus_floor-own")
        c, d = L["jupyter_client"]["p50"], L["jupyter_server_ws"]["p50"]
        dn = L["jupyter_server_ws_nodelay"]["p50"]
        lines.append(
            f"- {k}: bridge overhead (b) p50 − (a) p50 = **{us(b - a)} µs** (median of per-round "
            f"differences vs floor-ipc: {us(L['kernelbridge']['paired_minus_floor-ipc'])} µs"
            + (f", vs the daemon's own kernel: {us(own)} µs" if own is not None else "")
            + f"). (c)/(b) = **{c / b:.2f}x**, (d)/(b) = **{d / b:.2f}x** ({dn / b:.2f}x with "
            f"TCP_NODELAY); the floor itself is only {c / a:.2f}x below (c) and {d / a:.2f}x "
            f"below (d) ({dn / a:.2f}x with TCP_NODELAY).")
    return lines
