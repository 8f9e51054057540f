#!/usr/bin/python3
"""Latency: `1+1` through kernelbridge against its floor and its peers
(SPEC section 7), interleaved in shuffled rounds (kbbench/latency.py says how).

    /usr/bin/python3 bench/latency.py [--quick] [-n N] [--warmup W]
        [--kernels python3,xpython] [--wait-quiet S] [--binary PATH]
        [--results PATH] [--json FILE]

Prints the latency table and the targets table; saves bench/results/latency.json.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, latency, machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 rounds after 20 warm-up")
    ap.add_argument("-n", type=int, help="rounds (default 1000, --quick 200)")
    ap.add_argument("--warmup", type=int, help="warm-up rounds (default 50, --quick 20)")
    ap.add_argument("--kernels", default="python3,xpython")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="first wait up to S seconds for the machine to be >= 90%% idle")
    cli.add_common(ap)
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    n = args.n or (200 if args.quick else 1000)
    warmup = args.warmup if args.warmup is not None else (20 if args.quick else 50)
    tmp = cli.setup("kbl", drop_kb=False)
    env = machine.environment(binary, cli.ROOT)
    details = {"n": n, "warmup": warmup, "idle_before": machine.wait_quiet(args.wait_quiet, retry_window=5.0),
               "loadavg_before": machine.loadavg()}
    t0 = time.perf_counter()
    details["kernels"] = latency.measure(binary, tmp, args.kernels.split(","), n, warmup,
                                         args.seed, cli.log)
    details["elapsed_s"] = time.perf_counter() - t0
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(latency.tables(details)))
    cli.finish(args, "latency", details, latency.figures(details), env)


if __name__ == "__main__":
    main()
