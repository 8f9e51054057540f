#!/usr/bin/python3
"""Contexts forked from a warm template (--fork-template; SPEC sections 7
and 13), against contexts whose kernel is started:

- POST /contexts p50 (ready to run, cold: no pool) with the template, with
  a started kernel, and with the warm pool (the pool refilled before each);
- time to the first result of `import numpy, pandas; 1+1` in a new
  context, the template holding numpy and pandas, against a started kernel;
- USS and PSS per idle context (smaps_rollup, before its first run) for
  each count of --counts, template against started, and the machine's
  MemAvailable spent for the largest count.

    /usr/bin/python3 bench/template.py [-n 11] [--counts 1,10,30]
        [--binary PATH] [--results PATH] [--json FILE]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, stats  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402
from kbbench.results import figure  # noqa: E402

MODULES = "numpy,pandas"
FIRST = "import numpy, pandas; 1+1"


smaps = machine.smaps_mib


def mem_available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def wait_template(http, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = http.json("GET", "/health").get("template")
        if t and t["state"] == "ready":
            return t
        time.sleep(0.1)
    raise RuntimeError("the template did not become ready")


def create(http):
    t0 = time.perf_counter()
    ctx = http.json("POST", "/contexts", {"language": "python"}, expect=(201,))
    return time.perf_counter() - t0, ctx


def measure_creates(daemon, n, pooled=False):
    http = daemon.http
    creates, firsts = [], []
    for _ in range(n):
        if pooled:
            daemon.wait_pool_settled()
        seconds, ctx = create(http)
        creates.append(seconds)
        t0 = time.perf_counter()
        r = http.json("POST", "/run", {"code": FIRST, "context_id": ctx["context_id"]})
        if r["error"]:
            raise RuntimeError(r["error"])
        firsts.append(seconds + time.perf_counter() - t0)
        http.json("DELETE", f"/contexts/{ctx['context_id']}")
    return {"create": stats.summary(creates), "first_result": stats.summary(firsts)}


def measure_idle(http, count):
    """count idle contexts: USS and PSS of each, and MemAvailable spent."""
    before = mem_available_mib()
    ctxs = [create(http)[1] for _ in range(count)]
    time.sleep(1.0)  # settle: start-up garbage freed
    uss, pss = zip(*(smaps(c["pid"]) for c in ctxs))
    spent = before - mem_available_mib()
    for c in ctxs:
        http.json("DELETE", f"/contexts/{c['context_id']}")
    return {"count": count, "uss_mib": stats.summary(list(uss)), "pss_mib": stats.summary(list(pss)),
            "pss_total_mib": sum(pss), "mem_available_spent_mib": spent}


def one_mode(binary, tmp, name, args, n, counts, template):
    extra = (*NO_POOL, "--max-contexts", str(max(counts) + 8))
    if template:
        extra += ("--fork-template", f"python={MODULES}")
    daemon = Daemon(binary, os.path.join(tmp, name), extra)
    try:
        if template:
            wait_template(daemon.http)
        out = measure_creates(daemon, n)
        out["idle"] = {str(c): measure_idle(daemon.http, c) for c in counts}
        if template:
            out["template"] = daemon.http.json("GET", "/health")["template"]
    finally:
        daemon.stop()
    return out


def measure_pool(binary, tmp, n):
    daemon = Daemon(binary, os.path.join(tmp, "pool"), ("--pool", "python=1"))
    try:
        return measure_creates(daemon, n, pooled=True)
    finally:
        daemon.stop()


def figures(d):
    ms = 1e3
    t, s = d["template"], d["started"]
    top = str(max(int(c) for c in t["idle"]))
    return {
        "create_p50_ms.template": figure("POST /contexts from the template, cold, p50",
                                         t["create"]["p50"] * ms, "ms"),
        "create_p50_ms.started": figure("POST /contexts with a started kernel, cold, p50",
                                        s["create"]["p50"] * ms, "ms"),
        "create_p50_ms.pool": figure("POST /contexts from the warm pool, p50",
                                     d["pool"]["create"]["p50"] * ms, "ms"),
        "first_numpy_pandas_p50_ms.template": figure(
            "new context to the result of import numpy, pandas; 1+1 (template holds them), p50",
            t["first_result"]["p50"] * ms, "ms"),
        "first_numpy_pandas_p50_ms.started": figure(
            "the same with a started kernel, p50", s["first_result"]["p50"] * ms, "ms"),
        "idle_uss_mib.template": figure("an idle context's private memory (USS), template, p50",
                                        t["idle"][top]["uss_mib"]["p50"], "MiB"),
        "idle_uss_mib.started": figure("the same, started kernel, p50",
                                       s["idle"][top]["uss_mib"]["p50"], "MiB"),
        "idle_pss_ratio": figure(f"{top} idle contexts' total PSS, template / started",
                                 t["idle"][top]["pss_total_mib"] / s["idle"][top]["pss_total_mib"],
                                 "x"),
    }


def tables(d):
    lines = ["| | POST /contexts p50 | p90 | to `import numpy, pandas; 1+1` p50 |",
             "|---|---:|---:|---:|"]
    for key, label in (("template", "from the template (numpy, pandas)"),
                       ("started", "started kernel, cold"), ("pool", "warm pool (refilled)")):
        m = d[key]
        lines.append(f"| {label} | {m['create']['p50'] * 1e3:.0f} ms | "
                     f"{m['create']['p90'] * 1e3:.0f} ms | {m['first_result']['p50'] * 1e3:.0f} ms |")
    lines += ["", "| idle contexts | template USS p50 | PSS p50 | total PSS | MemAvailable spent "
              "| started USS p50 | PSS p50 | total PSS | MemAvailable spent |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in d["template"]["idle"]:
        t, s = d["template"]["idle"][c], d["started"]["idle"][c]
        lines.append(f"| {c} | {t['uss_mib']['p50']:.1f} MiB | {t['pss_mib']['p50']:.1f} MiB | "
                     f"{t['pss_total_mib']:.0f} MiB | {t['mem_available_spent_mib']:.0f} MiB | "
                     f"{s['uss_mib']['p50']:.1f} MiB | {s['pss_mib']['p50']:.1f} MiB | "
                     f"{s['pss_total_mib']:.0f} MiB | {s['mem_available_spent_mib']:.0f} MiB |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=11, help="samples of each latency")
    ap.add_argument("--counts", default="1,10,30", help="idle contexts measured at once")
    cli.add_common(ap)
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    tmp = cli.setup("kbt")
    env = machine.environment(binary, cli.ROOT)
    counts = [int(c) for c in args.counts.split(",")]
    details = {"n": args.n, "loadavg_before": machine.loadavg()}
    cli.log("template: contexts forked from the template")
    details["template"] = one_mode(binary, tmp, "t", args, args.n, counts, True)
    cli.log("template: contexts with started kernels")
    details["started"] = one_mode(binary, tmp, "s", args, args.n, counts, False)
    cli.log("template: the warm pool")
    details["pool"] = measure_pool(binary, tmp, args.n)
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(tables(details)))
    cli.finish(args, "template", details, figures(details), env)


if __name__ == "__main__":
    main()
