#!/usr/bin/python3
"""Where the daemon's time goes: the measurements behind docs/PERFORMANCE.md's
findings, each one command (needs `perf` from linux-perf; run as root).

    /usr/bin/python3 bench/diag.py syscalls [--kernel xpython] [--contexts 1,20] [-n 300]
        per request (`1+1` POST /run, GET /health), by daemon thread:
        system calls, context switches and CPU time (perf stat --per-thread)
    /usr/bin/python3 bench/diag.py output-profile [--max-output 64M]
        one run printing 100 MiB under `perf record`: the daemon's CPU by
        thread and by library (jansson's parser vs its dumper by address range)
    /usr/bin/python3 bench/diag.py zmq-memory
        RssAnon that libzmq itself costs per kernel: 3 DEALER + 1 SUB sockets
        connected over ipc (what the daemon holds per context), 20 times
    /usr/bin/python3 bench/diag.py pause-loss
        100 MiB in 1600 stream messages while the daemon is stopped (SIGSTOP)
        for 0, 0.5 and 1.5 s: what the result holds when the daemon falls
        behind the kernel's iopub PUB socket

Everything on 127.0.0.1, ephemeral ports, private temporary directories;
every process started is stopped.
"""

import argparse
import atexit
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kbbench import procs  # noqa: E402
from kbbench.daemon import Daemon  # noqa: E402
from kbbench.httpclient import Http  # noqa: E402

CODE_100M = "import sys\ns = 'x' * 1023 + '\\n'\nfor i in range(102400):\n    sys.stdout.write(s)\n"
CODE_100M_FLUSH = ("import sys\ns = ('x' * 1023 + '\\n') * 64\nfor i in range(1600):\n"
                   "    sys.stdout.write(s)\n    sys.stdout.flush()\n")


def _perf_stat(pid, n, fn, workdir, tag):
    out = os.path.join(workdir, f"stat-{tag}.csv")
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "--per-thread", "-e",
                             "raw_syscalls:sys_enter,context-switches,task-clock", "-o", out,
                             "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    for _ in range(n):
        fn()
    perf.send_signal(signal.SIGINT)
    perf.wait(30)
    agg = collections.defaultdict(lambda: collections.defaultdict(float))
    with open(out) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) < 4:
                continue
            try:
                val = float(fields[1])
            except ValueError:
                continue  # <not counted>
            agg[fields[3]][fields[0].rsplit("-", 1)[0]] += val
    return agg


def cmd_syscalls(args, tmp):
    print("| contexts | request | thread | syscalls / request | context switches / request "
          "| CPU µs / request |")
    print("|---:|---|---|---:|---:|---:|")
    for nctx in args.contexts:
        d = Daemon(args.binary, os.path.join(tmp, f"d{nctx}"), ("--pool", "python=0"))
        try:
            ctx = d.create_context(kernel_name=args.kernel)[0]
            for _ in range(nctx - 1):
                d.create_context(kernel_name=args.kernel)
            h = Http(d.port)
            body = json.dumps({"code": "1+1", "context_id": ctx["context_id"]}).encode()
            for _ in range(20):
                h.request("POST", "/run", body)
            for what, fn in (("GET /health", lambda: h.request("GET", "/health")),
                             ("POST /run", lambda: h.request("POST", "/run", body))):
                agg = _perf_stat(d.pid, args.n, fn, tmp, f"{nctx}-{what[:3]}")
                sc, cs, tc = agg["raw_syscalls:sys_enter"], agg["context-switches"], agg["task-clock"]
                for thread in sorted(tc, key=lambda t: -tc[t]):
                    if tc[thread] * 1e3 / args.n < 1:
                        continue
                    print(f"| {nctx} | {what} | {thread} | {sc[thread] / args.n:,.0f} | "
                          f"{cs[thread] / args.n:.1f} | {tc[thread] * 1e3 / args.n:,.0f} |")
            h.close()
        finally:
            d.stop()


def cmd_output_profile(args, tmp):
    d = Daemon(args.binary, os.path.join(tmp, "d"), ("--pool", "python=0", "--max-output", args.max_output))
    data = os.path.join(tmp, "perf.data")
    try:
        ctx = d.create_context(kernel_name="python3")[0]
        d.http.json("POST", "/run", {"code": "1+1", "context_id": ctx["context_id"]})
        perf = subprocess.Popen(["perf", "record", "-q", "-F", "2000", "-o", data, "-p", str(d.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        t0 = time.perf_counter()
        status, body = d.http.request("POST", "/run", json.dumps(
            {"code": CODE_100M, "context_id": ctx["context_id"]}).encode())
        wall = time.perf_counter() - t0
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
    finally:
        d.stop()
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                             "--sort", "comm,dso,sym", "-g", "none"], capture_output=True, text=True).stdout
    jansson = _jansson_ranges()
    buckets = collections.Counter()
    total_line = [ln for ln in report.splitlines() if ln.startswith("# Event count")]
    for line in report.splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[0].endswith("%"):
            continue
        share, comm, dso, sym = float(parts[0][:-1]), parts[1], parts[2], parts[4]
        if "jansson" in dso:
            try:
                dso = "libjansson " + jansson(int(sym, 16))
            except ValueError:
                dso = "libjansson (plt)"
        buckets[(comm, dso)] += share
    cpu_s = int(total_line[0].split()[-1]) / 1e9 if total_line else float("nan")
    print(f"one run printing 100 MiB, --max-output {args.max_output}: wall {wall:.2f} s, HTTP {status}, "
          f"{len(body) / 2**20:.1f} MiB body; daemon CPU sampled {cpu_s:.2f} s")
    print("")
    print("| thread (kernelbridge = the engine) | where | share of the daemon's CPU | ≈ CPU s |")
    print("|---|---|---:|---:|")
    for (comm, dso), share in buckets.most_common(12):
        print(f"| {comm} | {dso} | {share:.1f}% | {share / 100 * cpu_s:.2f} |")


def cmd_pause_loss(args, tmp):
    import threading

    d = Daemon(args.binary, os.path.join(tmp, "d"), ("--pool", "python=0", "--max-output", "200M"))
    try:
        ctx = d.create_context(kernel_name="python3")[0]
        body = json.dumps({"code": CODE_100M_FLUSH, "context_id": ctx["context_id"]}).encode()
        print("| daemon stopped during the run | stdout returned | truncated | reason | exit_code |")
        print("|---:|---:|---|---|---:|")
        for pause in (0, 0.5, 1.5):
            def pauser():
                time.sleep(0.1)
                os.kill(d.pid, signal.SIGSTOP)
                try:
                    time.sleep(pause)
                finally:
                    os.kill(d.pid, signal.SIGCONT)

            th = threading.Thread(target=pauser)
            if pause:
                th.start()
            status, data = d.http.request("POST", "/run", body)
            if pause:
                th.join()
            r = json.loads(data)
            print(f"| {pause} s | {len(r['logs']['stdout']) / 2**20:.1f} MiB | {r.get('truncated')} | "
                  f"{r['process']['reason']} | {r['process']['exit_code']} |")
            d.http.json("DELETE", f"/processes/{r['process']['process_id']}", expect=(204,))
    finally:
        try:
            os.kill(d.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        d.stop()


def cmd_zmq_memory(args, tmp):
    import zmq

    n = 20
    binder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time, zmq
c = zmq.Context()
socks = []
for i in range({n}):
    for j, t in enumerate((zmq.ROUTER, zmq.ROUTER, zmq.ROUTER, zmq.PUB)):
        s = c.socket(t)
        s.bind("ipc://{tmp}/s%d-%d" % (i, j))
        socks.append(s)
print("ok", flush=True)
sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        binder.stdout.readline()

        def anon():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("RssAnon"):
                        return int(line.split()[1])

        ctx = zmq.Context()
        first = ctx.socket(zmq.DEALER)  # the I/O thread and its buffers exist before the baseline
        time.sleep(0.3)
        base = anon()
        socks = []
        for i in range(n):
            for j, kind in enumerate((zmq.DEALER, zmq.DEALER, zmq.DEALER, zmq.SUB)):
                s = ctx.socket(kind)
                if kind == zmq.SUB:
                    s.setsockopt(zmq.SUBSCRIBE, b"")
                s.connect(f"ipc://{tmp}/s{i}-{j}")
                socks.append(s)
        time.sleep(1.0)
        print(f"libzmq {zmq.zmq_version()}: RssAnon per kernel's 4 connected sockets "
              f"(3 DEALER + 1 SUB, ipc): {(anon() - base) / n:.0f} KiB")
        for s in socks + [first]:
            s.close(0)
        ctx.term()
    finally:
        binder.stdin.close()
        binder.wait(10)


def _jansson_ranges():
    """Classify an address of libjansson (no debug symbols) by the exported
    functions around it: the parser's statics lie before json_loads, the
    dumper's before json_dump_callback, the UTF-8 checks and string buffer
    between json_unpack and json_object."""
    lib = "/lib/x86_64-linux-gnu/libjansson.so.4"
    syms = {}
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2].split("@")[0]] = int(parts[0], 16)

    def classify(addr):
        if addr < syms.get("json_dump_callback", 0):
            return "dump (json_dumps: escaping)"
        if syms.get("json_object_seed", 0) <= addr < syms.get("json_set_alloc_funcs", 0):
            return "load (json_loads: lexer)"
        if syms.get("json_unpack", 0) < addr < syms.get("json_object", 0):
            return "utf8 check / string buffer"
        return "other"

    return classify


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["syscalls", "output-profile", "pause-loss", "zmq-memory"])
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(HERE), "build", "kernelbridge"))
    ap.add_argument("--kernel", default="xpython")
    ap.add_argument("--contexts", default="1,20")
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--max-output", default="64M")
    args = ap.parse_args()
    args.contexts = [int(x) for x in args.contexts.split(",")]
    if not shutil.which("perf"):
        sys.exit("perf not found (apt-get install linux-perf)")
    tmp = tempfile.mkdtemp(prefix="kbd", dir="/tmp")
    atexit.register(lambda: shutil.rmtree(tmp, ignore_errors=True))
    atexit.register(procs.stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    {"syscalls": cmd_syscalls, "output-profile": cmd_output_profile,
     "pause-loss": cmd_pause_loss, "zmq-memory": cmd_zmq_memory}[args.command](args, tmp)


if __name__ == "__main__":
    main()
