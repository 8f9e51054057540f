#!/usr/bin/python3
"""Overhead: the bridge's cost back to back on the daemon's own kernel, the
daemon's CPU per request (also with more contexts on it), and its memory
idle and per context (SPEC section 7; kbbench/overhead.py says how).

    /usr/bin/python3 bench/overhead.py [--quick] [-n N] [--kernels python3,xpython]
        [--more 19] [--more-kernel xpython] [--contexts 20] [--parts back-to-back,memory]
        [--binary PATH] [--results PATH] [--json FILE]

Prints the tables and the targets table; saves bench/results/overhead.json.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, overhead  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 rounds, one memory cycle")
    ap.add_argument("-n", type=int, help="back-to-back rounds (default 300, --quick 100)")
    ap.add_argument("--warmup", type=int, help="warm-up rounds (default 50, --quick 20)")
    ap.add_argument("--kernels", default="python3,xpython")
    ap.add_argument("--more", type=int, default=19,
                    help="idle contexts added for the second back-to-back step (0: none)")
    ap.add_argument("--more-kernel", default="xpython", help="the kernelspec that step runs on")
    ap.add_argument("--contexts", type=int, default=20, help="contexts of the memory part")
    ap.add_argument("--parts", default="back-to-back,memory")
    cli.add_common(ap, seed=False)
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    n = args.n or (100 if args.quick else 300)
    warmup = args.warmup if args.warmup is not None else (20 if args.quick else 50)
    parts = args.parts.split(",")
    tmp = cli.setup("kbv", drop_kb=False)
    env = machine.environment(binary, cli.ROOT)
    details = {"n": n, "warmup": warmup, "loadavg_before": machine.loadavg(), "back_to_back": {}}
    t0 = time.perf_counter()
    if "back-to-back" in parts:
        for k in args.kernels.split(","):
            more = args.more if k == args.more_kernel else 0
            details["back_to_back"][k] = overhead.per_kernel(
                binary, os.path.join(tmp, f"b2b-{k}"), k, warmup, n, more, cli.log)
    if "memory" in parts:
        details["memory"] = overhead.memory(binary, tmp, args.contexts, 4,
                                            1 if args.quick else 2, cli.log)
    details["elapsed_s"] = time.perf_counter() - t0
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(overhead.tables(details)))
    cli.finish(args, "overhead", details, overhead.figures(details), env, inline="back_to_back")


if __name__ == "__main__":
    main()
