#!/usr/bin/python3
"""Jupyter's kernel websocket: kernelbridge's against Jupyter Server's, and
against kernelbridge's own POST /run on the same kernel (SPEC sections 7, 10).

    /usr/bin/python3 bench/jupyter_ws.py [-n 400] [--binary PATH] [--json FILE]

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

Prints Markdown tables (µs) with the ratios and a verdict per target:
kernelbridge's websocket p50 at least 5x lower than Jupyter Server's as
shipped, at least 1.3x lower than with TCP_NODELAY, and at most 100 µs over
POST /run on the same kernel. Everything listens on 127.0.0.1 with
ephemeral ports in a private temporary directory; every process started is
stopped at the end, also on error or Ctrl-C.
"""

import argparse
import atexit
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import websocket  # python3-websocket
from websocket import ABNF

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from kbbench import peers, raw  # noqa: E402
from kbbench.calls import run_once  # noqa: E402
from kbbench.machine import IdleMeter, environment, loadavg, private_environment, wait_quiet  # noqa: E402
from kbbench.stats import interleave, pct, summary, us  # noqa: E402

V1 = "v1.kernel.websocket.jupyter.org"
CODE = "1+1"
NO_POOL = ("--pool", "python=0")
NAGLE_S = 0.035  # a round of Jupyter Server as shipped this slow waited for a delayed ACK


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- a kernel websocket client, both framings ---------------------------------


def encode_v1(channel, header, parent, metadata, content):
    parts = [channel.encode()] + [json.dumps(x).encode() for x in (header, parent, metadata, content)]
    n = len(parts) + 1
    offsets, at = [], 8 * (n + 1)
    for part in parts:
        offsets.append(at)
        at += len(part)
    offsets.append(at)
    return struct.pack("<%dQ" % (n + 1), n, *offsets) + b"".join(parts)


def decode_v1(data):
    """(channel, msg_type, parent msg_id, content bytes) of a v1 frame; only
    the parts needed to follow a run are parsed."""
    n = struct.unpack_from("<Q", data)[0]
    off = struct.unpack_from("<%dQ" % n, data, 8)
    channel = data[off[0]:off[1]].decode()
    msg_type = json.loads(data[off[1]:off[2]])["msg_type"]
    parent = data[off[2]:off[3]]
    parent_id = json.loads(parent).get("msg_id") if len(parent) > 2 else None
    return channel, msg_type, parent_id, data[off[4]:off[5]]


class WsKernel:
    """websocket-client on /api/kernels/{id}/channels of kernelbridge or
    Jupyter Server; legacy JSON framing or (v1) the v1 subprotocol."""

    TIMEOUT_S = 60

    def __init__(self, port, kernel_id, token=None, v1=False, nodelay_server=False):

        self.v1 = v1
        self.session = uuid.uuid4().hex
        url = f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?session_id={self.session}"
        if nodelay_server:
            url += "&nodelay=1"  # kbbench/jupyter_server_launch.py
        self.ws = websocket.create_connection(
            url, timeout=120, header=[f"Authorization: token {token}"] if token else [],
            subprotocols=[V1] if v1 else None, skip_utf8_validation=True,
            sockopt=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),))
        if self.ws.getsubprotocol() != (V1 if v1 else None):
            raise RuntimeError(f"subprotocol {self.ws.getsubprotocol()!r}, wanted {V1 if v1 else None}")
        if not self.ws.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
            raise RuntimeError("TCP_NODELAY not set on the client socket")
        self.drained = 0  # messages of other runs read before an execute

    def _drain(self):
        """Read, untimed, what is waiting: iopub of other clients' runs, and
        pings (answered; recv() would wait past a ping for a data frame)."""
        while select.select([self.ws.sock], [], [], 0)[0]:
            opcode, _ = self.ws.recv_data(control_frame=True)
            self.drained += opcode in (ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY)

    def _next(self, deadline):
        """(channel, msg_type, parent msg_id, content) of the next message."""
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"websocket run: no reply and idle after {self.TIMEOUT_S} s")
        self.ws.settimeout(left)  # pings answered in recv() would keep a fixed timeout alive
        data = self.ws.recv()
        if self.v1:
            if isinstance(data, str):
                raise RuntimeError("a text frame in the v1 subprotocol")
            channel, msg_type, parent_id, content = decode_v1(data)
            return channel, msg_type, parent_id, content
        m = json.loads(data)
        return m.get("channel"), m["header"]["msg_type"], m["parent_header"].get("msg_id"), m["content"]

    def execute(self, code=CODE, expect="2"):
        self._drain()
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "username": "bench", "session": self.session,
                  "msg_type": "execute_request", "version": "5.3",
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": True}
        if self.v1:
            frame, send = encode_v1("shell", header, {}, {}, content), self.ws.send_binary
        else:
            frame = json.dumps({"header": header, "parent_header": {}, "metadata": {},
                                "content": content, "buffers": [], "channel": "shell"})
            send = self.ws.send
        t0 = time.perf_counter()
        send(frame)
        replied = idle = False
        result = status = None
        deadline = t0 + self.TIMEOUT_S
        while not (replied and idle):
            channel, msg_type, parent_id, body = self._next(deadline)
            if parent_id != msg_id:
                continue
            if msg_type == "execute_reply":
                replied = True
                status = (json.loads(body) if self.v1 else body)["status"]
            elif msg_type == "status":
                idle = (json.loads(body) if self.v1 else body)["execution_state"] == "idle"
            elif msg_type == "execute_result":
                result = (json.loads(body) if self.v1 else body)["data"]["text/plain"]
        dt = time.perf_counter() - t0
        if status != "ok" or result != expect:
            raise RuntimeError(f"websocket run: status {status}, result {result!r}")
        return dt

    def close(self):
        self.ws.close()


# ---- the rounds -------------------------------------------------------------------


def daemon_cpu(contenders, daemon, names, n):
    """The daemon's CPU (all threads, schedstat) per execute, back to back."""
    out = {}
    for k in names:
        for _ in range(20):
            contenders[k]()
        before = peers.schedstat(daemon.pid)
        t0 = time.perf_counter()
        for _ in range(n):
            contenders[k]()
        wall = time.perf_counter() - t0
        after = peers.schedstat(daemon.pid)
        out[k] = {"cpu_us": (after["cpu_ns"] - before["cpu_ns"]) / n / 1e3,
                  "slices": (after["slices"] - before["slices"]) / n,
                  "wall_us": wall / n * 1e6,
                  "by_thread_us": {t: (after["threads"].get(t, 0) - before["threads"].get(t, 0)) / n / 1e3
                                   for t in after["threads"]}}
    return out


def kill_leftovers(prefix):
    """SIGKILL every process whose command line names a file under prefix
    (kernels of a server that did not stop them)."""
    for pid in peers.pids_naming(prefix):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def measure(args, tmp):
    res = {"env": environment(args.binary, ROOT), "rounds": args.n, "warmup": args.warmup}
    log(f"waiting up to {args.wait_quiet:.0f} s for the CPUs to be 90% idle ...")
    res["idle_before"] = wait_quiet(args.wait_quiet, retry_window=5.0)
    res["loadavg_before"] = loadavg()
    closers = []
    try:
        daemon = peers.Daemon(args.binary, os.path.join(tmp, "daemon"), NO_POOL)
        closers.append(daemon.stop)
        closers.append(daemon.kill_processes_left)
        res["version"] = daemon.http.json("GET", "/health")["version"]
        server = peers.JupyterServer(os.path.join(tmp, "jupyter-server"))
        closers.append(server.stop)
        closers.append(lambda: kill_leftovers(os.path.join(tmp, "jupyter-server")))

        kb = {}
        for name in ("K1", "K2", "alone"):
            model = daemon.http.json("POST", "/api/kernels", {"name": "python3"}, expect=(201,))
            kb[name] = model["id"]
            closers.append(lambda kid=model["id"]: daemon.http.json(
                "DELETE", f"/api/kernels/{kid}", expect=(204, 404)))
        js = {name: server.start_kernel("python3") for name in ("shipped", "nodelay")}
        for kid in js.values():
            closers.append(lambda kid=kid: server.shutdown_kernel(kid))
        floor = raw.RawKernel("python3", os.path.join(tmp, "floor"), "ipc").start()
        closers.append(floor.shutdown)

        ws_legacy = WsKernel(daemon.port, kb["K1"])
        ws_v1 = WsKernel(daemon.port, kb["K2"], v1=True)
        js_ws = WsKernel(server.port, js["shipped"], token=server.token)
        js_ws_nd = WsKernel(server.port, js["nodelay"], token=server.token, nodelay_server=True)
        for w in (ws_legacy, ws_v1, js_ws, js_ws_nd):
            closers.append(w.close)
        runs = {}
        for name in ("K1", "K2", "alone"):
            h = peers.Http(daemon.port)
            closers.append(h.close)
            runs[name] = (h, json.dumps({"code": CODE, "context_id": kb[name]}).encode())

        def raw_once():
            dt, _, status = floor.execute(CODE)
            if status != "ok":
                raise RuntimeError(f"raw run: {status}")
            return dt

        contenders = {
            "kb-ws-legacy": ws_legacy.execute,
            "kb-ws-v1": ws_v1.execute,
            "kb-run-K1": lambda: run_once(*runs["K1"]),
            "kb-run-K2": lambda: run_once(*runs["K2"]),
            "kb-run-alone": lambda: run_once(*runs["alone"]),
            "js-ws": js_ws.execute,
            "js-ws-nodelay": js_ws_nd.execute,
            "floor": raw_once,
        }
        if args.no_floor:
            del contenders["floor"]
        log(f"{args.warmup} warm-up and {args.n} measured rounds of {len(contenders)} contenders ...")
        meter = IdleMeter()
        la0 = loadavg()
        t0 = time.perf_counter()
        samples = interleave(contenders, args.warmup, args.n, args.seed)
        res["rounds_s"] = time.perf_counter() - t0
        res["idle_rounds"] = meter.stop()
        res["loadavg_rounds"] = [la0, loadavg()]
        res["latency"] = {k: summary(v) for k, v in samples.items()}
        res["paired"] = {
            "kb-ws-legacy - kb-run-K1": pct([a - b for a, b in zip(samples["kb-ws-legacy"], samples["kb-run-K1"])], 50),
            "kb-ws-v1 - kb-run-K2": pct([a - b for a, b in zip(samples["kb-ws-v1"], samples["kb-run-K2"])], 50),
            "kb-run-K1 - kb-run-alone": pct([a - b for a, b in zip(samples["kb-run-K1"], samples["kb-run-alone"])], 50),
        }
        # Jupyter Server as shipped is bimodal: a round either waits for the
        # client's delayed ACK (40 ms; Nagle) or, when the server was late
        # enough to write the kernel's messages together, does not
        res["js_ws_nagle_share"] = sum(x >= NAGLE_S for x in samples["js-ws"]) / len(samples["js-ws"])
        res["drained"] = {"kb-ws-legacy": ws_legacy.drained, "kb-ws-v1": ws_v1.drained,
                          "js-ws": js_ws.drained, "js-ws-nodelay": js_ws_nd.drained}
        if args.samples:
            res["samples"] = samples
        if args.cpu_n:
            log(f"daemon CPU: {args.cpu_n} back-to-back executes per kernelbridge contender ...")
            meter = IdleMeter()
            res["daemon_cpu"] = daemon_cpu(contenders, daemon,
                                           ("kb-ws-legacy", "kb-ws-v1", "kb-run-K1", "kb-run-alone"),
                                           args.cpu_n)
            res["idle_cpu_phase"] = meter.stop()
        res["loadavg_after"] = loadavg()
        res["daemon_rss_kib"] = peers.proc_status(daemon.pid)["VmRSS"]
    finally:
        for fn in reversed(closers):
            try:
                fn()
            except Exception as e:  # keep stopping the rest
                log(f"cleanup: {e}")
    return res


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


def report(res):
    lines = []
    p = lines.append
    env = res["env"]
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
    verdicts = []
    for ws, run, name in WS:
        b = L[ws]["p50"]
        verdicts.append((f"kernelbridge websocket ({name}) p50 ≥ 5x lower than Jupyter Server's as shipped",
                         shipped / b >= 5, f"{shipped / b:.2f}x"))
        verdicts.append((f"kernelbridge websocket ({name}) p50 ≥ 1.3x lower than Jupyter Server with TCP_NODELAY",
                         nodelay / b >= 1.3, f"{nodelay / b:.2f}x"
                         + (f" (the floor: {nodelay / L['floor']['p50']:.2f}x)" if "floor" in L else "")))
        over = b - L[run]["p50"]
        paired = res["paired"][f"{ws} - {run}"]
        verdicts.append((f"websocket ({name}) over POST /run on the same kernel ≤ 100 µs p50",
                         over <= 100e-6 and paired <= 100e-6,
                         f"{us(over)} µs (paired: {us(paired)} µs)"))
    p("| target | met | measured |")
    p("|---|---|---|")
    for name, ok, val in verdicts:
        p(f"| {name} | {'yes' if ok else '**no**'} | {val} |")
    p("")
    p(f"- The fan-out: POST /run on K1 (one idle websocket attached) − POST /run on a kernel with none, "
      f"paired p50: {us(res['paired']['kb-run-K1 - kb-run-alone'])} µs. Messages of other runs read "
      f"(untimed) before an execute: " + ", ".join(f"{k} {v}" for k, v in res["drained"].items()) + ".")
    share = res["js_ws_nagle_share"]
    p(f"- Jupyter Server as shipped: {100 * share:.0f}% of its rounds took {NAGLE_S * 1e3:.0f} ms or more "
      "(a frame waiting for the client's delayed ACK, Nagle's algorithm being on); the others did not "
      "wait (presumably the server, late on a busy machine, wrote the kernel's messages together)."
      + (" Its p50 lies between the two modes, so the ratios to (d) are fragile: a few rounds more in "
         "the fast mode would move them a lot." if 0.3 <= share <= 0.7 else ""))
    if res["idle_rounds"] < 0.5:
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
    ap.add_argument("--binary", help="kernelbridge binary (default: build it in ./build)")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--wait-quiet", type=float, default=180, metavar="S",
                    help="first wait up to S seconds for the CPUs to be >= 90%% idle (default 180)")
    ap.add_argument("--cpu-n", type=int, default=300,
                    help="back-to-back executes per contender for the daemon's CPU (0: skip)")
    ap.add_argument("--no-floor", action="store_true", help="leave out the raw ZeroMQ floor")
    ap.add_argument("--samples", action="store_true", help="keep every sample in --json")
    args = ap.parse_args()
    if not args.binary:
        build = os.path.join(ROOT, "build")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build, "-j2", "--target", "kernelbridge_cli"], check=True,
                       stdout=subprocess.DEVNULL)
        args.binary = os.path.join(build, "kernelbridge")
    args.binary = os.path.abspath(args.binary)

    tmp = tempfile.mkdtemp(prefix="kbw", dir="/tmp")  # short: ipc path limits
    atexit.register(lambda: shutil.rmtree(tmp, ignore_errors=True))
    atexit.register(peers.stop_all)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(130))
    private_environment(tmp)

    res = measure(args, tmp)
    res["cpu_n"] = args.cpu_n
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    print(report(res))


if __name__ == "__main__":
    main()
