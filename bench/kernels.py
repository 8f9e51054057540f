#!/usr/bin/python3
"""Start time and `1+1` latency of each kernel, through kernelbridge.

    /usr/bin/python3 bench/kernels.py [--starts N] [--runs N] [--json FILE]
                                      [--kernels python3,xpython,ir,octave,deno]

For each kernelspec, one `kernelbridge serve` (loopback, ephemeral port,
private state dir, no warm pool) and, over one kept-alive HTTP connection:

  start   POST /contexts {kernel_name} until the context is ready: the
          kernel's own start-up plus the bridge's launch and readiness
          handshake (cold: no pool), N times, each context deleted after;
  1+1     POST /run {"code": "1+1"} on one context, N times after 3 warm-up
          runs: the whole round trip a client sees.

Prints a Markdown table (median and 90th percentile) for the README. Deno's
kernelspec is the one scripts/setup.sh writes into .cache/deno/jupyter; its
daemon runs with --transport tcp (Deno's kernel cannot use ipc endpoints).
Every process started is stopped at the end.
"""

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("KB_BINARY", os.path.join(ROOT, "build", "kernelbridge"))
DENO_JUPYTER = os.path.join(ROOT, ".cache", "deno", "jupyter")

KERNELS = {
    # kernelspec: (what it is, extra daemon args)
    "python3": ("Python (ipykernel)", ()),
    "xpython": ("Python (xeus-python)", ()),
    "ir": ("R (IRkernel)", ()),
    "octave": ("Octave (octave_kernel)", ()),
    "deno": ("TypeScript/JavaScript (Deno)", ("--transport", "tcp")),
}


class Daemon:
    def __init__(self, args):
        self.dir = tempfile.mkdtemp(prefix="kbbench-kernels-")
        port_file = os.path.join(self.dir, "port")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        env["JUPYTER_PATH"] = DENO_JUPYTER
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--listen", "127.0.0.1:0", "--port-file", port_file,
             "--state-dir", os.path.join(self.dir, "state"), "--pool", "python=0", *args],
            stdout=self.log, stderr=self.log, env=env, cwd=self.dir)
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise SystemExit("kernelbridge did not start; see %s" % self.dir)
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = int(f.read().strip())
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def call(self, method, path, body=None, expect=200):
        self.conn.request(method, path, json.dumps(body) if body is not None else None,
                          {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status != expect:
            raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:500]))
        return json.loads(data) if data else None

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def measure(name, starts, runs):
    label, args = KERNELS[name]
    d = Daemon(args)
    try:
        start_times = []
        for _ in range(starts):
            t = time.perf_counter()
            ctx = d.call("POST", "/contexts", {"kernel_name": name}, expect=201)
            start_times.append(time.perf_counter() - t)
            d.call("DELETE", "/contexts/%s" % ctx["context_id"], expect=204)
        ctx = d.call("POST", "/contexts", {"kernel_name": name}, expect=201)["context_id"]
        body = {"code": "1+1", "context_id": ctx}
        for _ in range(3):
            d.call("POST", "/run", body)
        latencies = []
        for _ in range(runs):
            t = time.perf_counter()
            result = d.call("POST", "/run", body)
            latencies.append(time.perf_counter() - t)
            if result["error"] is not None:
                raise SystemExit("%s: 1+1 failed: %s" % (name, result["error"]))
        return {
            "kernel": name, "label": label, "starts": starts, "runs": runs,
            "start_p50_s": statistics.median(start_times),
            "start_p90_s": percentile(start_times, 0.9),
            "run_p50_ms": statistics.median(latencies) * 1000,
            "run_p90_ms": percentile(latencies, 0.9) * 1000,
        }
    finally:
        d.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=5, help="cold starts per kernel")
    parser.add_argument("--runs", type=int, default=50, help="1+1 runs per kernel")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--json", help="also write the figures to this file")
    opts = parser.parse_args()
    rows = []
    for name in opts.kernels.split(","):
        # octave_kernel answers a run in about half a second: fewer runs
        runs = max(5, opts.runs // 5) if name == "octave" else opts.runs
        rows.append(measure(name, opts.starts, runs))
        print("measured %s" % name, file=sys.stderr)
    print("kernelbridge %s, %s, %d CPUs, %s" % (BINARY, platform.platform(), os.cpu_count(),
                                                time.strftime("%Y-%m-%d")))
    print()
    print("| kernel | start (p50 / p90) | `1+1` (p50 / p90) |")
    print("|---|---|---|")
    for r in rows:
        print("| %s (`%s`) | %.2f s / %.2f s | %.1f ms / %.1f ms |"
              % (r["label"], r["kernel"], r["start_p50_s"], r["start_p90_s"], r["run_p50_ms"],
                 r["run_p90_ms"]))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
