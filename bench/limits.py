#!/usr/bin/python3
"""The cost and the promise of per-context limits (SPEC "Limits and accounting"):

  sampler   the daemon's CPU while its contexts are idle: a daemon with no
            limits, and daemons with 1 and N contexts limited (memory and
            pids), each measured over the same idle window; the sampler's
            own thread CPU from /health (limits.sampler_cpu_s).
  p50       `1+1` through POST /run on 3 limited and 3 unlimited contexts
            of one daemon, in shuffled interleaved rounds: what limits add
            (the two halves of the unlimited side show the noise between
            kernels); and the daemon's own time measuring each run, from
            /health (limits.accounting_start_s, accounting_end_s,
            runs_metered).
  targets   R rounds each of: `b'x' * 2**31` in a 512 MiB context (typed
            MemoryError, context kept, the run's peak at most 1.1x the
            limit); a tree of children that ignore SIGINT, together over
            the limit (ends memory_limit, no child left).

    /usr/bin/python3 bench/limits.py [--contexts 100] [--idle 30] [--rounds 400]
        [--targets 20] [--sections sampler,p50,targets] [--binary PATH]

Everything listens on 127.0.0.1 (ephemeral ports) and lives in private
temporary dirs; every daemon and kernel started is stopped at the end.
"""
import argparse
import os
import pathlib
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from durability import Daemon, cpu_seconds  # noqa: E402
from kbbench.stats import pct  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT = 512 << 20
TREE_CODE = """
import subprocess, sys
child = '''
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
b = b'x' * (150 << 20)
time.sleep(600)  # kb-bench-limits-tree
'''
procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(5)]
for p in procs:
    p.wait()
"""


def live_with(marker):
    found = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read()
            with open("/proc/%s/stat" % entry) as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmdline and not zombie:
            found += 1
    return found


def limited_body(limited):
    body = {"language": "python"}
    if limited:
        body.update(memory_limit=LIMIT, pids_limit=64)
    return body


def sampler(binary, counts, idle):
    print("\n### the sampler with idle contexts (python3 kernels, %.0f s idle each)\n" % idle)
    print("| daemon | limited contexts | daemon CPU (% of one core) | sampler thread CPU "
          "(% of one core) | sampler ticks |")
    print("|---|---|---|---|---|")
    for limited, n in [(False, max(counts))] + [(True, n) for n in counts]:
        d = Daemon(binary, None, "--max-contexts", str(max(counts) + 4))
        try:
            for i in range(n):
                d.ok("POST", "/contexts", limited_body(limited))
            time.sleep(1.0)  # the kernels settle
            h0 = d.ok("GET", "/health")["limits"]
            c0 = cpu_seconds(d.proc.pid)
            time.sleep(idle)
            c1 = cpu_seconds(d.proc.pid)
            h1 = d.ok("GET", "/health")["limits"]
        finally:
            d.close()
        print("| %s | %d | %.3f | %.3f | %d |" % (
            "limits" if limited else "no limits", n if limited else 0, (c1 - c0) / idle * 100,
            (h1["sampler_cpu_s"] - h0["sampler_cpu_s"]) / idle * 100,
            h1["sampler_ticks"] - h0["sampler_ticks"]))


def p50(binary, rounds, per_group=3):
    """`1+1` on per_group limited and per_group unlimited contexts of one
    daemon, every context once a round in a shuffled order: kernels differ
    from one another by tens of microseconds, so each side is several
    kernels, and the halves of the unlimited side against each other show
    that noise. The daemon's own time measuring runs (every context's,
    limited or not) comes from /health."""
    d = Daemon(binary, None)
    samples = {}
    try:
        cids = {}
        for name in ("no limits", "limits"):
            for i in range(per_group):
                cids[(name, i)] = d.ok("POST", "/contexts",
                                       limited_body(name == "limits"))["context_id"]
                samples[(name, i)] = []
        for _ in range(20):
            for cid in cids.values():
                d.ok("POST", "/run", {"code": "1+1", "context_id": cid})
        h0 = d.ok("GET", "/health")["limits"]
        for _ in range(rounds):
            order = list(cids)
            random.shuffle(order)
            for key in order:
                t0 = time.perf_counter()
                r = d.ok("POST", "/run", {"code": "1+1", "context_id": cids[key]})
                samples[key].append((time.perf_counter() - t0) * 1e6)
                assert r["results"][0]["text"] == "2", r
        h1 = d.ok("GET", "/health")["limits"]
    finally:
        d.close()

    def pooled(name, which=range(per_group)):
        return [v for i in which for v in samples[(name, i)]]

    print("\n### `1+1` through POST /run, %d interleaved rounds, %d contexts of each kind, "
          "one daemon\n" % (rounds, per_group))
    print("| contexts | p50 (µs) | p90 (µs) | p50 against no limits (µs) |")
    print("|---|---|---|---|")
    base = pct(pooled("no limits"), 50)
    half = per_group // 2 or 1
    rows = [("no limits", pooled("no limits")), ("limits", pooled("limits")),
            ("no limits, first %d (A/A noise)" % half, pooled("no limits", range(half))),
            ("no limits, the other %d (A/A noise)" % (per_group - half),
             pooled("no limits", range(half, per_group)))]
    for name, values in rows:
        print("| %s | %.0f | %.0f | %+.0f |" % (name, pct(values, 50), pct(values, 90),
                                               pct(values, 50) - base))
    runs = max(h1["runs_metered"] - h0["runs_metered"], 1)
    print("\nThe daemon's own time measuring runs (CPU, memory peak; every context's, limited "
          "or not), per run over %d runs: %.1f µs at the start, once the request is out "
          "(overlapped with the kernel), %.1f µs at the end (on the result's path)." % (
              runs, (h1["accounting_start_s"] - h0["accounting_start_s"]) / runs * 1e6,
              (h1["accounting_end_s"] - h0["accounting_end_s"]) / runs * 1e6))


def targets(binary, rounds):
    d = Daemon(binary, None)
    alloc_ok = tree_ok = 0
    peaks, tree_times = [], []
    try:
        cid = d.ok("POST", "/contexts", limited_body(True))["context_id"]
        for i in range(rounds):
            d.ok("POST", "/run", {"code": "kept = %d" % i, "context_id": cid})
            r = d.ok("POST", "/run", {"code": "y = b'x' * 2**31", "context_id": cid})
            peak = r["resources"]["peak_memory_bytes"]
            peaks.append(peak / LIMIT)
            kept = d.ok("POST", "/run", {"code": "kept", "context_id": cid})
            if ((r["error"] or {}).get("name") == "MemoryError" and peak <= 1.1 * LIMIT
                    and kept["results"][0]["text"] == str(i)):
                alloc_ok += 1
        for i in range(rounds):
            t0 = time.perf_counter()
            r = d.ok("POST", "/run", {"code": TREE_CODE, "context_id": cid})
            tree_times.append(time.perf_counter() - t0)
            deadline = time.monotonic() + 5
            while live_with(b"kb-bench-limits-tree") and time.monotonic() < deadline:
                time.sleep(0.05)
            if (r["process"]["reason"] == "memory_limit"
                    and (r["error"] or {}).get("name") == "MemoryLimitExceeded"
                    and not live_with(b"kb-bench-limits-tree")):
                tree_ok += 1
    finally:
        d.close()
    print("\n### typed ends over a 512 MiB limit, %d rounds each\n" % rounds)
    print("| case | typed, as promised | detail |")
    print("|---|---|---|")
    print("| `b'x' * 2**31` (RLIMIT_DATA) | %d/%d | MemoryError, context kept; peak/limit "
          "max %.2f |" % (alloc_ok, rounds, max(peaks)))
    print("| 5 children ignoring SIGINT, 150 MiB each | %d/%d | memory_limit, no child left; "
          "run p50 %.2f s (interrupt grace 2 s) |" % (tree_ok, rounds, pct(tree_times, 50)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", type=int, default=100)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--sections", default="sampler,p50,targets")
    parser.add_argument("--binary", default=str(ROOT / "build" / "kernelbridge"))
    args = parser.parse_args()
    sections = args.sections.split(",")
    if "sampler" in sections:
        sampler(args.binary, sorted({1, args.contexts}), args.idle)
    if "p50" in sections:
        p50(args.binary, args.rounds)
    if "targets" in sections:
        targets(args.binary, args.targets)


if __name__ == "__main__":
    main()
