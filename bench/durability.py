#!/usr/bin/python3
"""The cost and the promise of the state dir (SPEC "Durability"):

  persistence  `1+1` through POST /run on three daemons side by side, in
               shuffled interleaved rounds: --ephemeral (no state.db), a
               state dir on tmpfs (/dev/shm) and one on disk (/var/tmp);
               p50/p90 and what persistence adds to the p50.
  adopt        N contexts (each with a variable) on a daemon that is then
               SIGKILLed; a new daemon on the same state dir: seconds from
               its spawn until it listens (adoption is done by then) and
               until every context answered a run reading its variable.
  cycles       C crash-and-restart cycles (start, a run, the next batch
               written, a second run, SIGKILL at once): kernels left that
               no context owns (orphans), finished records written before
               the crash that did not come back (lost), and how many of the
               second runs, ended within the batch's hold (20 ms) when the
               daemon was killed, did (SPEC section 8: records are kept up
               to the last batch).

    /usr/bin/python3 bench/durability.py [--rounds N] [--adopt 1,10,50]
        [--cycles C] [--sections persistence,adopt,cycles] [--binary PATH]
        [--results PATH] [--json FILE]

Everything listens on 127.0.0.1 (ephemeral ports) and lives in private
temporary dirs; every daemon and kernel started is killed at the end.
"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, procs  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon, kill_kernels  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct  # noqa: E402


def start(binary: str, state_dir: str | None, *args: str) -> Daemon:
    """A daemon without a pool; on `state_dir`, or --ephemeral when None."""
    return Daemon(binary, None, (*NO_POOL, *args), state_dir=state_dir,
                  ephemeral=state_dir is None)


def private_dir(base: str) -> str:
    return tempfile.mkdtemp(prefix="kbdur-", dir=base)


def persistence(binary: str, rounds: int) -> dict[str, Any]:
    places = {"ephemeral": None, "tmpfs (/dev/shm)": private_dir("/dev/shm"),
              "disk (/var/tmp)": private_dir("/var/tmp")}
    daemons, samples, cids = {}, {name: [] for name in places}, {}
    try:
        for name, base in places.items():
            daemons[name] = start(binary, base and os.path.join(base, "state"))
            cids[name] = daemons[name].ok("POST", "/contexts", {"language": "python"})["context_id"]
        body = {name: {"code": "1+1", "context_id": cids[name]} for name in places}
        for _ in range(20):
            for name, d in daemons.items():
                d.ok("POST", "/run", body[name])
        cpu0 = {name: procs.process_cpu_s(d.pid) for name, d in daemons.items()}
        for _ in range(rounds):
            order = list(places)
            random.shuffle(order)
            for name in order:
                t0 = time.perf_counter()
                r = daemons[name].ok("POST", "/run", body[name])
                samples[name].append((time.perf_counter() - t0) * 1e6)
                assert r["results"][0]["text"] == "2", r
        cpu = {name: (procs.process_cpu_s(d.pid) - cpu0[name]) / rounds * 1e6
               for name, d in daemons.items()}
        writes = {name: d.ok("GET", "/health")["state"] for name, d in daemons.items()}
    finally:
        for d in daemons.values():
            d.stop()
        for base in places.values():
            if base:
                kill_kernels(os.path.join(base, "state"))
                shutil.rmtree(base, ignore_errors=True)
    return {"rounds": rounds, "places": {name: {
        "p50_us": pct(samples[name], 50), "p90_us": pct(samples[name], 90),
        "paired_us": pct([a - b for a, b in zip(samples[name], samples["ephemeral"])], 50),
        "cpu_per_run_us": cpu[name], "batches": writes[name].get("batches")} for name in places}}


def adopt(binary: str, counts: list[int]) -> dict[str, Any]:
    out = {}
    for n in counts:
        base = private_dir("/var/tmp")
        state = os.path.join(base, "state")
        try:
            d = start(binary, state, "--max-contexts", str(n + 4))
            cids = []
            for i in range(n):
                cid = d.ok("POST", "/contexts", {"language": "python"})["context_id"]
                d.ok("POST", "/run", {"code": "v = %d" % i, "context_id": cid})
                cids.append(cid)
            d.crash()
            d = start(binary, state, "--max-contexts", str(n + 4))
            for i, cid in enumerate(cids):
                r = d.ok("POST", "/run", {"code": "print(v)", "context_id": cid})
                assert r["logs"]["stdout"] == "%d\n" % i, r
            answered = time.perf_counter() - d.started
            adopted = len(d.ok("GET", "/contexts")["contexts"])
            out[str(n)] = {"listening_s": d.listening_s, "answered_s": answered, "adopted": adopted}
            d.stop()
        finally:
            kill_kernels(state)
            shutil.rmtree(base, ignore_errors=True)
    return out


def cycles(binary: str, count: int) -> dict[str, Any]:
    base = private_dir("/var/tmp")
    state = os.path.join(base, "state")
    kernels = state + "/kernels/"
    records, last, orphans_seen, cid = [], [], 0, None
    t0 = time.perf_counter()
    try:
        for cycle in range(count):
            d = start(binary, state)
            if cid is None:
                cid = d.ok("POST", "/contexts", {"language": "python"})["context_id"]
            r = d.ok("POST", "/run", {"code": "print(%d)" % cycle, "context_id": cid})
            records.append(r["process"]["process_id"])
            written(d)
            r = d.ok("POST", "/run", {"code": "print('last')", "context_id": cid})
            last.append(r["process"]["process_id"])
            d.crash()
            orphans_seen = max(orphans_seen, len(procs.pids_naming(kernels, zombies=False)) - 1)
        d = start(binary, state)
        kept = {p["process_id"] for p in d.ok("GET", "/processes")["processes"]}
        alive = len(d.ok("GET", "/contexts")["contexts"])
        d.stop()
        left = len(procs.pids_naming(kernels, zombies=False))
    finally:
        kill_kernels(state)
        shutil.rmtree(base, ignore_errors=True)
    return {"cycles": count, "elapsed_s": time.perf_counter() - t0, "orphans": orphans_seen,
            "lost": len(set(records) - kept), "records": len(records), "alive": alive == 1,
            "kernels_left": left, "last_kept": len(set(last) & kept)}


def written(d: Daemon, timeout: float = 10.0) -> None:
    """Wait until the daemon holds nothing for the next batch and its writer
    is not behind (GET /health's state)."""
    deadline = time.perf_counter() + timeout
    while True:
        state = d.ok("GET", "/health")["state"]
        if state["held"] is False and state["behind"] == 0:
            return
        if time.perf_counter() > deadline:
            raise RuntimeError(f"state.db not written within {timeout} s: {state}")
        time.sleep(0.005)


def figures(res: dict[str, Any]) -> Figures:
    out: Figures = {}
    P = res.get("persistence")
    if P:
        base = P["places"]["ephemeral"]["p50_us"]
        for key, name in (("tmpfs", "tmpfs (/dev/shm)"), ("disk", "disk (/var/tmp)")):
            out[f"persistence.{key}_added_us"] = figure(
                f"{key}: p50 added", P["places"][name]["p50_us"] - base, "µs")
            out[f"persistence.{key}_paired_us"] = figure(
                f"state dir on {key} − `--ephemeral`, median of per-round differences",
                P["places"][name]["paired_us"], "µs")
    for n, A in res.get("adopt", {}).items():
        out[f"adopt.{n}.answered_s"] = figure(f"{n} contexts re-adopted: every one answered",
                                              A["answered_s"], "s")
        out[f"adopt.{n}.listening_s"] = figure(f"{n} contexts: the new daemon listening after",
                                               A["listening_s"], "s")
    C = res.get("cycles")
    if C:
        for key, value in (("orphans", C["orphans"]), ("lost_records", C["lost"]),
                           ("kernels_left", C["kernels_left"])):
            out[f"cycles.{key}"] = figure(key, value, "count")
        out["cycles.count"] = figure("crash-and-restart cycles", C["cycles"], "count")
        out["cycles.last_kept"] = figure("records of runs ended within the hold when the daemon "
                                         "was killed that came back", C["last_kept"], "count")
    return out


def tables(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    P = res.get("persistence")
    if P:
        base = P["places"]["ephemeral"]["p50_us"]
        lines += [f"### persistence: `1+1` through POST /run, {P['rounds']} interleaved rounds", "",
                  "| state dir | p50 (µs) | p90 (µs) | p50 added (µs) | paired difference p50 (µs) "
                  "| daemon CPU per run (µs, all threads) | batches written |",
                  "|---|---|---|---|---|---|---|"]
        for name, x in P["places"].items():
            lines.append("| %s | %.0f | %.0f | %+.0f | %+.0f | %.0f | %s |" % (
                name, x["p50_us"], x["p90_us"], x["p50_us"] - base, x["paired_us"],
                x["cpu_per_run_us"], "-" if x["batches"] is None else x["batches"]))
        lines.append("")
    if res.get("adopt"):
        lines += ["### re-adoption after SIGKILL (python3 kernels)", "",
                  "| contexts | new daemon listening (s) | every context answered (s) | adopted |",
                  "|---|---|---|---|"]
        for n, A in res["adopt"].items():
            lines.append("| %s | %.3f | %.3f | %d/%s |" % (n, A["listening_s"], A["answered_s"],
                                                          A["adopted"], n))
        lines.append("")
    C = res.get("cycles")
    if C:
        lines += ["### %d crash-and-restart cycles (%.0f s)" % (C["cycles"], C["elapsed_s"]), "",
                  "| orphaned kernels (most at once) | lost finished records (written before the "
                  "crash) | records of runs ended within the hold that came back | context alive "
                  "at the end | kernels left after a plain stop |", "|---|---|---|---|---|",
                  "| %d | %d of %d | %d of %d | %s | %d |" % (
                      C["orphans"], C["lost"], C["records"], C["last_kept"], C["cycles"],
                      C["alive"], C["kernels_left"]), ""]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--adopt", default="1,10,50")
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--sections", default="persistence,adopt,cycles")
    cli.add_common(parser, seed=False)
    args = parser.parse_args()
    args.binary = cli.check_binary(args.binary)
    sections = args.sections.split(",")
    cli.setup("kbu")
    env = machine.environment(args.binary, cli.ROOT)
    res: dict[str, Any] = {}
    if "persistence" in sections:
        res["persistence"] = persistence(args.binary, args.rounds)
    if "adopt" in sections:
        res["adopt"] = adopt(args.binary, [int(n) for n in args.adopt.split(",")])
    if "cycles" in sections:
        res["cycles"] = cycles(args.binary, args.cycles)
    print("\n".join(tables(res)))
    cli.finish(args, "durability", res, figures(res), env)


if __name__ == "__main__":
    main()
