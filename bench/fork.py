#!/usr/bin/python3
"""Forks, checkpoints and rollback through the HTTP API (concept: fork;
SPEC sections 7 and 13), against what a platform does without forks:

- fork-to-first-run: POST /contexts/{id}/fork, then POST /run `x.shape` on
  the fork, for parents holding a NumPy array of 10 MiB, 500 MiB, 2 GiB;
  beside it, a new context that loads the same array (np.load of the
  saved .npy), the way to get the same state without forks;
- 32 forks of the 500 MiB context in one request;
- checkpoint (POST /contexts/{id}/checkpoints) and restore p50;
- POST /run `1+1` with rollback "on_error" against without, interleaved;
- each fork's private memory (USS, and PSS, from smaps_rollup) right after
  the fork, and after it writes 10% of the array.

    /usr/bin/python3 bench/fork.py [-n 11] [--sizes 10,500,2048]
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


smaps = machine.smaps_mib


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def run(http, ctx_id, code, **fields):
    result = http.json("POST", "/run", dict(code=code, context_id=ctx_id, **fields))
    if result["error"]:
        raise RuntimeError(f"{code!r}: {result['error']}")
    return result


def parent_of(http, mib, npy):
    ctx = http.json("POST", "/contexts", {"language": "python"})["context_id"]
    run(http, ctx, f"import numpy as np\nx = np.ones({mib} << 17)\nnp.save({npy!r}, x)")
    return ctx


def measure_size(http, mib, n, tmp):
    npy = os.path.join(tmp, f"x{mib}.npy")
    parent = parent_of(http, mib, npy)
    fork_first, load_first, uss, pss, uss_written = [], [], [], [], []
    for _ in range(n):
        def fork_and_run():
            child = http.json("POST", f"/contexts/{parent}/fork", {})["contexts"][0]
            run(http, child["context_id"], "x.shape")
            return child
        seconds, child = timed(fork_and_run)
        fork_first.append(seconds)
        u, p = smaps(child["pid"])
        uss.append(u)
        pss.append(p)
        run(http, child["context_id"], "x[: len(x) // 10] = 2")
        uss_written.append(smaps(child["pid"])[0])
        http.json("DELETE", f"/contexts/{child['context_id']}")

        def load_and_run():
            ctx = http.json("POST", "/contexts", {"language": "python"})["context_id"]
            run(http, ctx, f"import numpy as np\nx = np.load({npy!r})\nx.shape")
            return ctx
        seconds, ctx = timed(load_and_run)
        load_first.append(seconds)
        http.json("DELETE", f"/contexts/{ctx}")
    out = {"fork_first_run": stats.summary(fork_first), "load_first_run": stats.summary(load_first),
           "uss_mib": stats.summary(uss), "pss_mib": stats.summary(pss),
           "uss_after_10pct_mib": stats.summary(uss_written)}
    http.json("DELETE", f"/contexts/{parent}")
    os.unlink(npy)
    return out


def measure_many(http, tmp, count=32, mib=500):
    parent = parent_of(http, mib, os.path.join(tmp, "many.npy"))
    seconds, answer = timed(lambda: http.json("POST", f"/contexts/{parent}/fork", {"count": count}))
    forks = answer["contexts"]
    assert len(forks) == count
    for child in forks:
        http.json("DELETE", f"/contexts/{child['context_id']}")
    http.json("DELETE", f"/contexts/{parent}")
    return {"count": count, "seconds": seconds}


def measure_checkpoints(http, tmp, n, warmup, seed):
    ctx = parent_of(http, 500, os.path.join(tmp, "cp.npy"))
    made, restored = [], []
    for _ in range(n):
        seconds, cp = timed(lambda: http.json("POST", f"/contexts/{ctx}/checkpoints", {}))
        made.append(seconds)
        seconds, _ = timed(lambda: http.json("POST", f"/contexts/{ctx}/restore",
                                             {"checkpoint_id": cp["checkpoint_id"]}))
        restored.append(seconds)
        run(http, ctx, "x.shape")
        http.json("DELETE", f"/contexts/{ctx}/checkpoints/{cp['checkpoint_id']}")
    rounds = stats.interleave({
        "plain": lambda: timed(lambda: run(http, ctx, "1+1"))[0],
        "rollback": lambda: timed(lambda: run(http, ctx, "1+1", rollback="on_error"))[0],
    }, warmup, n, seed)
    http.json("DELETE", f"/contexts/{ctx}")
    return {"checkpoint": stats.summary(made), "restore": stats.summary(restored),
            "run_plain": stats.summary(rounds["plain"]),
            "run_rollback": stats.summary(rounds["rollback"])}


def figures(d):
    ms = 1e3
    out = {}
    for mib, m in d["sizes"].items():
        out[f"first_run_p50_ms.{mib}mib"] = figure(
            f"fork to the first run's result, parent holding {mib} MiB, p50",
            m["fork_first_run"]["p50"] * ms, "ms")
        out[f"load_first_run_p50_ms.{mib}mib"] = figure(
            f"a new context that np.load()s the same {mib} MiB, to its first result, p50",
            m["load_first_run"]["p50"] * ms, "ms")
        out[f"uss_mib.{mib}mib"] = figure(f"a fresh fork's USS, parent holding {mib} MiB, p50",
                                          m["uss_mib"]["p50"], "MiB")
    out["many.32_forks_s"] = figure("32 forks of the 500 MiB context in one request",
                                    d["many"]["seconds"], "s")
    cp = d["checkpoints"]
    out["checkpoint_p50_ms"] = figure("checkpoint of a 500 MiB context, p50",
                                      cp["checkpoint"]["p50"] * ms, "ms")
    out["restore_p50_ms"] = figure("restore of it, p50", cp["restore"]["p50"] * ms, "ms")
    out["rollback_run_added_ms"] = figure(
        "POST /run 1+1 with rollback on_error − without, p50 (interleaved)",
        (cp["run_rollback"]["p50"] - cp["run_plain"]["p50"]) * ms, "ms")
    return out


def tables(d):
    lines = ["| parent holds | fork → first result p50 | p90 | np.load context → first result p50 "
             "| fork USS p50 | PSS p50 | USS after writing 10% |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for mib, m in d["sizes"].items():
        lines.append(f"| {mib} MiB | {m['fork_first_run']['p50'] * 1e3:.0f} ms | "
                     f"{m['fork_first_run']['p90'] * 1e3:.0f} ms | "
                     f"{m['load_first_run']['p50'] * 1e3:.0f} ms | {m['uss_mib']['p50']:.1f} MiB | "
                     f"{m['pss_mib']['p50']:.1f} MiB | {m['uss_after_10pct_mib']['p50']:.1f} MiB |")
    cp = d["checkpoints"]
    lines += ["", f"32 forks of the 500 MiB context: {d['many']['seconds']:.2f} s", "",
              "| operation | p50 | p90 |", "|---|---:|---:|"]
    for key, label in (("checkpoint", "checkpoint"), ("restore", "restore"),
                       ("run_plain", "POST /run 1+1"), ("run_rollback", "same, rollback on_error")):
        lines.append(f"| {label} | {cp[key]['p50'] * 1e3:.1f} ms | {cp[key]['p90'] * 1e3:.1f} ms |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=11, help="samples of each figure")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="10,500,2048", help="MiB held by the parents")
    cli.add_common(ap)
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    tmp = cli.setup("kbf")
    env = machine.environment(binary, cli.ROOT)
    daemon = Daemon(binary, os.path.join(tmp, "d"), (*NO_POOL, "--max-contexts", "80"))
    try:
        http = daemon.http
        details = {"sizes": {}, "n": args.n}
        for mib in (int(s) for s in args.sizes.split(",")):
            cli.log(f"fork: parents holding {mib} MiB")
            details["sizes"][str(mib)] = measure_size(http, mib, args.n, tmp)
        cli.log("fork: 32 forks at once")
        details["many"] = measure_many(http, tmp)
        cli.log("fork: checkpoints, restores, rollback")
        details["checkpoints"] = measure_checkpoints(http, tmp, args.n, args.warmup, args.seed)
    finally:
        daemon.stop()
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(tables(details)))
    cli.finish(args, "fork", details, figures(details), env)


if __name__ == "__main__":
    main()
