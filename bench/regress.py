#!/usr/bin/python3
"""Regression: this build against a baseline build, side by side in one run
(concept: regress; kbbench/regress.py says how): POST /run p50 and the
daemon's CPU per run in interleaved rounds, and the daemon's RSS per
context. For a change that must not alter behaviour (a reorganisation),
build the commit before it and give it as --baseline:

    git worktree add /tmp/kb-base <commit> && cmake -S /tmp/kb-base -B /tmp/kb-base/build \
        -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/kb-base/build --target kernelbridge_cli
    /usr/bin/python3 bench/regress.py --baseline /tmp/kb-base/build/kernelbridge
        [-n 400] [--warmup 50] [--contexts 10] [--binary PATH] [--results PATH] [--json FILE]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, regress  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the kernelbridge binary to compare with")
    ap.add_argument("-n", type=int, default=400, help="interleaved rounds")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--contexts", type=int, default=10, help="contexts of the memory part, each")
    cli.add_common(ap)
    args = ap.parse_args()
    binaries = {"build": cli.check_binary(args.binary), "baseline": cli.check_binary(args.baseline)}
    tmp = cli.setup("kbr", drop_kb=False)
    env = machine.environment(binaries["build"], cli.ROOT)
    details = regress.measure(binaries, tmp, args.warmup, args.n, args.contexts, args.seed, cli.log)
    details["loadavg_after"] = machine.loadavg()
    print("\n".join(regress.tables(details)))
    cli.finish(args, "regress", details, regress.figures(details), env,
               note=f"baseline: {binaries['baseline']}")


if __name__ == "__main__":
    main()
