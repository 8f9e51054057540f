#!/usr/bin/python3
"""CPU: the daemon's instructions and CPU per `1+1` run, by thread and by
function (concept: cpu; kbbench/cpu.py says how): under callgrind (counted,
the same on a busy machine) and under schedstat (time, with the bridge
overhead on the daemon's own kernel beside it).

    /usr/bin/python3 bench/cpu.py [-n 300] [--callgrind-n 100] [--warmup 20]
        [--kernels xpython,python3] [--parts callgrind,schedstat] [--keep DIR]
        [--binary PATH] [--results PATH] [--json FILE]

--keep DIR keeps the callgrind dumps (one file per thread) for
`callgrind_annotate --inclusive=yes --tree=caller FILE`.
Prints the tables and the targets table; saves bench/results/cpu.json.
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, cpu, machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300, help="schedstat rounds")
    ap.add_argument("--callgrind-n", type=int, default=100, help="runs counted under callgrind")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--kernels", default="xpython,python3")
    ap.add_argument("--parts", default="callgrind,schedstat")
    ap.add_argument("--keep", metavar="DIR", help="keep the callgrind dumps in DIR")
    cli.add_common(ap, seed=False)
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    parts = args.parts.split(",")
    if "callgrind" in parts and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        sys.exit("callgrind: valgrind is not installed (Debian: valgrind)")
    tmp = cli.setup("kbc", drop_kb=False)
    env = machine.environment(binary, cli.ROOT)
    details = {"n": args.n, "callgrind_n": args.callgrind_n, "warmup": args.warmup,
               "loadavg_before": machine.loadavg(), "kernels": {}}
    t0 = time.perf_counter()
    for k in args.kernels.split(","):
        D = details["kernels"].setdefault(k, {})
        if "callgrind" in parts:
            D["callgrind"] = cpu.callgrind(binary, os.path.join(tmp, f"cg-{k}"), k, args.warmup,
                                           args.callgrind_n, cli.log, args.keep)
        if "schedstat" in parts:
            D["schedstat"] = cpu.schedstat(binary, os.path.join(tmp, f"ss-{k}"), k, args.warmup,
                                           args.n, cli.log)
    details["elapsed_s"] = time.perf_counter() - t0
    details["workdir"] = tmp  # removed at the end, with everything in it
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(cpu.tables(details)))
    cli.finish(args, "cpu", details, cpu.figures(details), env)


if __name__ == "__main__":
    main()
