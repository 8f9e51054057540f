#!/usr/bin/python3
"""Context creation, cold and from the warm pool (SPEC section 7;
kbbench/pool.py says how each figure is taken).

    /usr/bin/python3 bench/pool.py [--quick] [--parts create,interleaved]
        [--kernels python3,xpython] [--create-rounds N] [--warm-rounds N]
        [--rounds N] [--binary PATH] [--results PATH] [--json FILE]

  create       cold POST /contexts vs the kernel's own start-up vs
               jupyter_client (--create-rounds, default 10, --quick 4), then
               warm creates from a pool (--warm-rounds, default 30, --quick 10)
  interleaved  a daemon without a pool and one with one, side by side:
               POST /contexts and an isolated POST /run (--rounds, default 10)

Prints the tables and the targets table; saves bench/results/pool.json.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, pool  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="create,interleaved")
    ap.add_argument("--kernels", default="python3,xpython")
    ap.add_argument("--create-rounds", type=int)
    ap.add_argument("--warm-rounds", type=int)
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the interleaved part")
    cli.add_common(ap)
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    parts = args.parts.split(",")
    create_rounds = args.create_rounds or (4 if args.quick else 10)
    warm_rounds = args.warm_rounds or (10 if args.quick else 30)
    tmp = cli.setup("kbp", drop_kb=False)
    env = machine.environment(binary, cli.ROOT)
    details = {"create_rounds": create_rounds, "warm_rounds": warm_rounds, "rounds": args.rounds,
               "loadavg_before": machine.loadavg()}
    t0 = time.perf_counter()
    if "create" in parts:
        details["create"] = pool.create(binary, tmp, args.kernels.split(","), create_rounds,
                                        warm_rounds, args.seed, cli.log)
    if "interleaved" in parts:
        details["interleaved"] = pool.interleaved(binary, tmp, args.rounds, args.seed)
    details["elapsed_s"] = time.perf_counter() - t0
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(pool.tables(details)))
    cli.finish(args, "pool", details, pool.figures(details), env)


if __name__ == "__main__":
    main()
