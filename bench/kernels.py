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

Prints a Markdown table (median and 90th percentile) for docs/concepts/kernels.md. Deno's
kernelspec is the one scripts/setup.sh writes into .cache/deno/jupyter; its
daemon runs with --transport tcp (Deno's kernel cannot use ipc endpoints).
Every process started is stopped at the end.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402

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


def start(args):
    """A daemon without a pool that sees Deno's kernelspec."""
    env = dict(os.environ, JUPYTER_PATH=DENO_JUPYTER)
    try:
        return Daemon(BINARY, None, (*NO_POOL, *args), env=env, timeout=30)
    except RuntimeError as e:
        raise SystemExit("kernelbridge did not start: %s" % e)


def call(d, method, path, body=None, expect=200):
    status, data = d.http.request(method, path, body)
    if status != expect:
        raise SystemExit("%s %s: %d %s" % (method, path, status, data[:500]))
    return json.loads(data) if data else None


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def measure(name, starts, runs):
    label, args = KERNELS[name]
    d = start(args)
    try:
        start_times = []
        for _ in range(starts):
            t = time.perf_counter()
            ctx = call(d, "POST", "/contexts", {"kernel_name": name}, expect=201)
            start_times.append(time.perf_counter() - t)
            call(d, "DELETE", "/contexts/%s" % ctx["context_id"], expect=204)
        ctx = call(d, "POST", "/contexts", {"kernel_name": name}, expect=201)["context_id"]
        body = {"code": "1+1", "context_id": ctx}
        for _ in range(3):
            call(d, "POST", "/run", body)
        latencies = []
        for _ in range(runs):
            t = time.perf_counter()
            result = call(d, "POST", "/run", body)
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
        d.stop()


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
