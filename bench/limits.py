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
        [--results PATH] [--json FILE]

Everything listens on 127.0.0.1 (ephemeral ports) and lives in private
temporary dirs; every daemon and kernel started is stopped at the end.
"""
import argparse
import os
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, procs, report  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct  # noqa: E402

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


def start(binary: str, *args: str) -> Daemon:
    return Daemon(binary, None, (*NO_POOL, *args), ephemeral=True)


def limited_body(limited):
    body = {"language": "python"}
    if limited:
        body.update(memory_limit=LIMIT, pids_limit=64)
    return body


def sampler(binary: str, counts: list[int], idle: float) -> dict[str, Any]:
    rows = []
    for limited, n in [(False, max(counts))] + [(True, n) for n in counts]:
        d = start(binary, "--max-contexts", str(max(counts) + 4))
        try:
            for _ in range(n):
                d.ok("POST", "/contexts", limited_body(limited))
            time.sleep(1.0)  # the kernels settle
            h0 = d.ok("GET", "/health")["limits"]
            c0 = procs.process_cpu_s(d.pid)
            time.sleep(idle)
            c1 = procs.process_cpu_s(d.pid)
            h1 = d.ok("GET", "/health")["limits"]
        finally:
            d.stop()
        rows.append({"limited": limited, "contexts": n, "daemon_pct": (c1 - c0) / idle * 100,
                     "sampler_pct": (h1["sampler_cpu_s"] - h0["sampler_cpu_s"]) / idle * 100,
                     "ticks": h1["sampler_ticks"] - h0["sampler_ticks"]})
    return {"idle_s": idle, "rows": rows}


def p50(binary: str, rounds: int, per_group: int = 3) -> dict[str, Any]:
    """`1+1` on per_group limited and per_group unlimited contexts of one
    daemon, every context once a round in a shuffled order: kernels differ
    from one another by tens of microseconds, so each side is several
    kernels, and the halves of the unlimited side against each other show
    that noise. The daemon's own time measuring runs (every context's,
    limited or not) comes from /health."""
    d = start(binary)
    samples: dict[tuple[str, int], list[float]] = {}
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
        d.stop()

    def pooled(name, which=range(per_group)):
        return [v for i in which for v in samples[(name, i)]]

    half = per_group // 2 or 1
    groups = {"no limits": pooled("no limits"), "limits": pooled("limits"),
              f"no limits, first {half} (A/A noise)": pooled("no limits", range(half)),
              f"no limits, the other {per_group - half} (A/A noise)":
                  pooled("no limits", range(half, per_group))}
    runs = max(h1["runs_metered"] - h0["runs_metered"], 1)
    return {"rounds": rounds, "per_group": per_group,
            "groups": {k: {"p50_us": pct(v, 50), "p90_us": pct(v, 90)} for k, v in groups.items()},
            "metered_runs": runs,
            "accounting_start_us": (h1["accounting_start_s"] - h0["accounting_start_s"]) / runs * 1e6,
            "accounting_end_us": (h1["accounting_end_s"] - h0["accounting_end_s"]) / runs * 1e6}


def _typed_alloc(d: Daemon, cid: str, i: int, peak_bound: float) -> tuple[bool, float]:
    d.ok("POST", "/run", {"code": "kept = %d" % i, "context_id": cid})
    r = d.ok("POST", "/run", {"code": "y = b'x' * 2**31", "context_id": cid})
    peak = r["resources"]["peak_memory_bytes"]
    kept = d.ok("POST", "/run", {"code": "kept", "context_id": cid})
    ok = ((r["error"] or {}).get("name") == "MemoryError" and peak <= peak_bound * LIMIT
          and kept["results"][0]["text"] == str(i))
    return ok, peak / LIMIT


def _typed_tree(d: Daemon, cid: str) -> tuple[bool, float]:
    t0 = time.perf_counter()
    r = d.ok("POST", "/run", {"code": TREE_CODE, "context_id": cid})
    dt = time.perf_counter() - t0
    deadline = time.monotonic() + 5
    while procs.count_with(b"kb-bench-limits-tree") and time.monotonic() < deadline:
        time.sleep(0.05)
    ok = (r["process"]["reason"] == "memory_limit"
          and (r["error"] or {}).get("name") == "MemoryLimitExceeded"
          and not procs.count_with(b"kb-bench-limits-tree"))
    return ok, dt


def targets(binary: str, rounds: int) -> dict[str, Any]:
    peak_bound = report.bound("limits", "typed.alloc_peak_ratio")
    d = start(binary)
    try:
        cid = d.ok("POST", "/contexts", limited_body(True))["context_id"]
        alloc = [_typed_alloc(d, cid, i, peak_bound) for i in range(rounds)]
        tree = [_typed_tree(d, cid) for _ in range(rounds)]
    finally:
        d.stop()
    return {"rounds": rounds, "alloc_ok": sum(ok for ok, _ in alloc),
            "peak_ratio_max": max(x for _, x in alloc), "tree_ok": sum(ok for ok, _ in tree),
            "tree_p50_s": pct([x for _, x in tree], 50)}


def figures(res: dict[str, Any]) -> Figures:
    out: Figures = {}
    S = res.get("sampler")
    if S:
        most = max((r for r in S["rows"] if r["limited"]), key=lambda r: r["contexts"])
        out["sampler.most.sampler_pct"] = figure(
            f"sampler thread with {most['contexts']} limited contexts", most["sampler_pct"], "%")
        out["sampler.most.daemon_pct"] = figure(
            f"daemon CPU idle with {most['contexts']} limited contexts, % of one core",
            most["daemon_pct"], "%")
    P = res.get("p50")
    if P:
        g = P["groups"]
        out["p50.added_us"] = figure("limits added", g["limits"]["p50_us"] - g["no limits"]["p50_us"], "µs")
        aa = [v["p50_us"] - g["no limits"]["p50_us"] for k, v in g.items() if "A/A" in k]
        out["p50.aa_noise_us"] = figure("A/A noise: the halves of the unlimited side against it, "
                                        "largest", max(aa, key=abs), "µs")
        out["p50.accounting_end_us"] = figure("the daemon's accounting at a run's end, per run",
                                              P["accounting_end_us"], "µs")
    T = res.get("targets")
    if T:
        n = T["rounds"]
        out["typed.alloc_share"] = figure("alloc typed", T["alloc_ok"] / n, "share")
        out["typed.alloc_peak_ratio"] = figure("alloc peak ÷ limit", T["peak_ratio_max"], "x")
        out["typed.tree_share"] = figure("tree typed", T["tree_ok"] / n, "share")
    return out


def tables(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    S = res.get("sampler")
    if S:
        lines += ["### the sampler with idle contexts (python3 kernels, %.0f s idle each)" % S["idle_s"],
                  "", "| daemon | limited contexts | daemon CPU (% of one core) | sampler thread "
                  "CPU (% of one core) | sampler ticks |", "|---|---|---|---|---|"]
        for r in S["rows"]:
            lines.append("| %s | %d | %.3f | %.3f | %d |" % (
                "limits" if r["limited"] else "no limits", r["contexts"] if r["limited"] else 0,
                r["daemon_pct"], r["sampler_pct"], r["ticks"]))
        lines.append("")
    P = res.get("p50")
    if P:
        base = P["groups"]["no limits"]["p50_us"]
        lines += ["### `1+1` through POST /run, %d interleaved rounds, %d contexts of each kind, "
                  "one daemon" % (P["rounds"], P["per_group"]), "",
                  "| contexts | p50 (µs) | p90 (µs) | p50 against no limits (µs) |", "|---|---|---|---|"]
        for name, g in P["groups"].items():
            lines.append("| %s | %.0f | %.0f | %+.0f |" % (name, g["p50_us"], g["p90_us"],
                                                         g["p50_us"] - base))
        lines += ["", "The daemon's own time measuring runs (CPU, memory peak; every context's, "
                  "limited or not), per run over %d runs: %.1f µs at the start, once the request "
                  "is out (overlapped with the kernel), %.1f µs at the end (on the result's path)."
                  % (P["metered_runs"], P["accounting_start_us"], P["accounting_end_us"]), ""]
    T = res.get("targets")
    if T:
        n = T["rounds"]
        lines += ["### typed ends over a 512 MiB limit, %d rounds each" % n, "",
                  "| case | typed, as promised | detail |", "|---|---|---|",
                  "| `b'x' * 2**31` (RLIMIT_DATA) | %d/%d | MemoryError, context kept; peak/limit "
                  "max %.2f |" % (T["alloc_ok"], n, T["peak_ratio_max"]),
                  "| 5 children ignoring SIGINT, 150 MiB each | %d/%d | memory_limit, no child "
                  "left; run p50 %.2f s (interrupt grace 2 s) |" % (T["tree_ok"], n, T["tree_p50_s"]), ""]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, default=100)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--sections", default="sampler,p50,targets")
    cli.add_common(parser, seed=False)
    args = parser.parse_args()
    args.binary = cli.check_binary(args.binary)
    sections = args.sections.split(",")
    cli.setup("kbm")
    env = machine.environment(args.binary, cli.ROOT)
    res: dict[str, Any] = {}
    if "sampler" in sections:
        res["sampler"] = sampler(args.binary, sorted({1, args.contexts}), args.idle)
    if "p50" in sections:
        res["p50"] = p50(args.binary, args.rounds)
    if "targets" in sections:
        res["targets"] = targets(args.binary, args.targets)
    print("\n".join(tables(res)))
    cli.finish(args, "limits", res, figures(res), env)


if __name__ == "__main__":
    main()
