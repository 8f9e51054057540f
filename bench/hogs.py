#!/usr/bin/python3
"""A short run beside long ones (concept: hogs; SPEC section 7, "under load").

`1+1` through POST /run on an idle context, quiet and while 2 x cores other
contexts of the same daemon spin `while True: pass`, on two daemons side by
side in interleaved rounds (which goes first alternates):
  (before) `--hog-after 0`: the spinning kernels keep the daemon's priority;
  (after)  `--hog-after 1` (the default): a run busy past 1 s drops to nice 19
           on every thread of its kernel until it ends.
Each round: the probe's quiet p50 on that daemon, then its hogs start (each
a POST /run with a timeout, which interrupts it), the probe waits past the
threshold and runs `1+1` back to back until the hogs' last second, and
GET /health is timed between probes. Only one daemon's hogs spin at a time.
Prints p50 / p90 of each and the ratio of the loaded p50 to the quiet p50;
targets (targets.py): after, loaded p50 at most 1.5x quiet; /health p99 at
most 50 ms.

    /usr/bin/python3 bench/hogs.py [--rounds 3] [--hogs N] [--spin S]
        [--binary PATH] [--results PATH] [--json FILE]

The daemons are started here (--ephemeral, no pool) with the repository's
kernelspecs on JUPYTER_PATH and python=python3 (ipykernel).
"""
import argparse
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402
from kbbench.httpclient import Http  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct, summary  # noqa: E402

MODES = {"before": ("--hog-after", "0"), "after": ("--hog-after", "1")}
HOG_AFTER_S = 1.0
SETTLE_S = 0.5  # past the threshold (the sampler ticks every 100 ms) before probing


def probe(http: Http, ctx: str) -> float:
    """Seconds for one `1+1`, its result checked."""
    started = time.perf_counter()
    r = http.json("POST", "/run", {"code": "1+1", "context_id": ctx})
    elapsed = time.perf_counter() - started
    if r["error"] is not None or r["results"][0]["text"] != "2":
        sys.exit("unexpected result: %r" % r)
    return elapsed


def health(http: Http) -> float:
    started = time.perf_counter()
    http.json("GET", "/health")
    return time.perf_counter() - started


def spin(port: int, ctx: str, seconds: float, errors: list[str]) -> None:
    """One hog: `while True: pass` until its timeout interrupts it."""
    http = Http(port)
    try:
        r = http.json("POST", "/run", {"code": "while True: pass", "context_id": ctx,
                                       "timeout": seconds})
        if not r["error"] or r["error"]["name"] != "TimeoutError":
            errors.append("a hog ended without its timeout: %r" % r["error"])
    except Exception as e:  # noqa: BLE001 - reported, the round is not counted silently
        errors.append(repr(e))
    finally:
        http.close()


def one_round(d: Daemon, probe_ctx: str, hogs: list[str], spin_s: float,
              quiet_n: int) -> dict[str, list[float]]:
    http = Http(d.port)
    try:
        for _ in range(3):
            probe(http, probe_ctx)
        quiet = [probe(http, probe_ctx) for _ in range(quiet_n)]
        errors: list[str] = []
        threads = [threading.Thread(target=spin, args=(d.port, c, spin_s, errors)) for c in hogs]
        started = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(HOG_AFTER_S + SETTLE_S)
        loaded: list[float] = []
        health_s: list[float] = []
        while time.perf_counter() - started < spin_s - 1.0:
            loaded.append(probe(http, probe_ctx))
            health_s.append(health(http))
        for t in threads:
            t.join(spin_s + 60)
        if errors:
            sys.exit("hogs: %s" % errors[:3])
        return {"quiet_s": quiet, "loaded_s": loaded, "health_s": health_s}
    finally:
        http.close()


def measure(binary: str, env: dict[str, str], rounds: int, n_hogs: int, spin_s: float,
            quiet_n: int) -> dict[str, Any]:
    daemons: dict[str, Daemon] = {}
    res: dict[str, Any] = {"rounds": rounds, "hogs": n_hogs, "cpus": os.cpu_count(),
                           "spin_s": spin_s, "loadavg_start": list(os.getloadavg())}
    try:
        ctxs: dict[str, tuple[str, list[str]]] = {}
        for mode, flag in MODES.items():
            d = daemons[mode] = Daemon(binary, None, (*NO_POOL,
                                                      *flag), ephemeral=True, env=env)
            made = [d.ok("POST", "/contexts", {"language": "python"})["context_id"]
                    for _ in range(n_hogs + 1)]
            ctxs[mode] = (made[0], made[1:])
            res[mode] = {"quiet_s": [], "loaded_s": [], "health_s": []}
        for i in range(rounds):
            order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
            for mode in order:
                got = one_round(daemons[mode], *ctxs[mode], spin_s, quiet_n)
                for k, v in got.items():
                    res[mode][k].extend(v)
                cli.log("round %d %s: quiet p50 %.2f ms, loaded p50 %.2f ms (%d probes)"
                        % (i + 1, mode, pct(got["quiet_s"], 50) * 1e3,
                           pct(got["loaded_s"], 50) * 1e3, len(got["loaded_s"])))
        for mode, d in daemons.items():
            res[mode]["lowered_runs"] = d.ok("GET", "/health")["limits"]["priority"]["lowered_runs"]
    finally:
        for d in daemons.values():
            d.stop()
    res["loadavg_end"] = list(os.getloadavg())
    return res


def figures(res: dict[str, Any]) -> Figures:
    out: Figures = {}
    for mode in MODES:
        r = res[mode]
        q, l_ = pct(r["quiet_s"], 50), pct(r["loaded_s"], 50)
        out[f"{mode}.quiet_p50_ms"] = figure(f"{mode}: `1+1` quiet, p50", q * 1e3, "ms")
        out[f"{mode}.loaded_p50_ms"] = figure(
            f"{mode}: `1+1` while {res['hogs']} contexts spin, p50", l_ * 1e3, "ms")
        out[f"{mode}.ratio"] = figure(f"{mode}: loaded p50 ÷ quiet p50", l_ / q, "x")
        out[f"{mode}.health_p99_ms"] = figure(f"{mode}: GET /health p99 while they spin",
                                              pct(r["health_s"], 99) * 1e3, "ms")
    return out


def tables(res: dict[str, Any]) -> list[str]:
    lines = ["hogs: %d rounds, %d contexts spinning on %d CPUs for %.0f s each round, "
             "load average at the start %s (the machine is shared: other work runs too)"
             % (res["rounds"], res["hogs"], res["cpus"], res["spin_s"],
                " ".join("%.2f" % x for x in res["loadavg_start"])),
             "", "| daemon | quiet p50 ms | loaded p50 ms | loaded p90 ms | ratio | "
             "/health p99 ms | probes | runs lowered |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in MODES:
        r = res[mode]
        q, l_ = pct(r["quiet_s"], 50), pct(r["loaded_s"], 50)
        lines.append("| %s (%s) | %.2f | %.2f | %.2f | %.2fx | %.2f | %d | %d |"
                     % (mode, " ".join(MODES[mode]), q * 1e3, l_ * 1e3,
                        pct(r["loaded_s"], 90) * 1e3, l_ / q, pct(r["health_s"], 99) * 1e3,
                        len(r["loaded_s"]), r["lowered_runs"]))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per daemon (default 3)")
    ap.add_argument("--hogs", type=int, default=2 * (os.cpu_count() or 1),
                    help="contexts spinning (default 2 x cores)")
    ap.add_argument("--spin", type=float, default=8.0, help="seconds the hogs spin per round")
    ap.add_argument("--quiet-n", type=int, default=30, help="quiet probes per round")
    cli.add_common(ap, seed=False)
    a = ap.parse_args()
    a.binary = cli.check_binary(a.binary)
    tmp = cli.setup("kbhog")
    env = machine.environment(a.binary, cli.ROOT)
    jupyter = os.path.join(tmp, "jupyter")
    os.mkdir(jupyter)
    os.symlink(os.path.join(cli.ROOT, "kernelspecs"), os.path.join(jupyter, "kernels"))
    res = measure(a.binary, {**os.environ, "JUPYTER_PATH": jupyter}, max(a.rounds, 1),
                  a.hogs, max(a.spin, HOG_AFTER_S + SETTLE_S + 2), a.quiet_n)
    print("\n".join(tables(res)))
    details = {k: ({kk: (summary(vv) if kk.endswith("_s") else vv) for kk, vv in v.items()}
                   if k in MODES else v) for k, v in res.items()}
    cli.finish(a, "hogs", details, figures(res), env)


if __name__ == "__main__":
    main()
