#!/usr/bin/python3
"""The output axis: runs that print a lot, against the daemon's bounds.

    /usr/bin/python3 bench/output.py [--rounds N] [--parts rate,single,concurrent,concurrent8,stall]
        [--binary PATH] [--results PATH] [--json FILE] [--memory-bound GIB]

One part after the other, each on a `kernelbridge serve` of its own
(`--pool python=0`, 127.0.0.1, ephemeral port, private state dir), each for
N rounds (default 3; kbbench/output_axis.py says how each figure is taken):

  rate        100 MiB printed through `POST /run` (plain JSON, read fully;
              `--max-output 200M`) vs the raw ZeroMQ client on a kernel of
              the same kernelspec, as one stream message and flushed every
              1 MiB, each client keeping the output in a buffer of its own
              and parsing it after: MB/s each, daemon / raw (target at least
              80%); and both clients as measured before, beside them
  single      one 200 MiB run at the default 64 MiB cap, chunked and as one
              message: the daemon's peak RSS − idle (target cap + 32 MiB),
              `truncated: true` and stdout exactly 64 MiB
  concurrent  four 200 MiB runs at once on four contexts and connections
              (`--max-output-memory 256M` if the daemon has it): peak RSS −
              idle (target 256 + 64 MiB); then every record deleted and the
              RSS followed for 5 s (target: back within idle + 16 MiB)
  stall       an SSE reader of a 200 MiB run that stops reading for 10 s:
              peak RSS − idle (target: the cap) and whether `result` came

Prints Markdown tables and the targets table (bench/targets.py); saves
bench/results/output.json. The bench's own memory
(this process, the daemon, the kernels) is kept under --memory-bound
(default 3 GiB): over it, the daemon and its kernels are killed and the part
fails. Every process started is stopped at the end, also on error or Ctrl-C.
"""

import argparse
import hashlib
import os
import shutil
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kbbench import cli, machine, output_axis, output_report  # noqa: E402

PARTS = ("rate", "single", "concurrent", "concurrent8", "stall")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each part (default 3)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"a subset of {','.join(PARTS)}")
    ap.add_argument("--memory-bound", type=float, default=3.0, metavar="GIB",
                    help="kill the daemon and its kernels when the bench's RSS passes this (default 3)")
    cli.add_common(ap)
    args = ap.parse_args()
    parts = tuple(p for p in args.parts.split(",") if p)
    if not set(parts) <= set(PARTS) or not parts:
        sys.exit(f"--parts: a subset of {','.join(PARTS)}")
    cli.check_binary(args.binary)
    avail = machine.mem_available_kib()
    if avail < args.memory_bound * 1024 * 1024 * 1.2:
        sys.exit(f"{avail // 1024} MiB available: too little for a bound of {args.memory_bound} GiB")
    tmp = cli.setup("kbo")  # only the flags configure the daemon
    env = machine.environment(args.binary, cli.ROOT)
    t_start = time.perf_counter()
    res: dict[str, Any] = {"loadavg_before": machine.loadavg(), "idle_before": machine.cpu_idle(2.0),
                           "workdir": tmp}  # removed at the end, with everything in it
    # a copy: every part runs the same build, also if ./build is rebuilt meanwhile
    binary = os.path.join(tmp, "kernelbridge")
    shutil.copy2(args.binary, binary)
    with open(binary, "rb") as fb:
        res["binary_sha256"] = hashlib.sha256(fb.read()).hexdigest()
    res["output"] = output_axis.measure(binary, tmp, args.rounds, args.seed,
                                        args.memory_bound, cli.log, parts)
    res["elapsed_s"] = time.perf_counter() - t_start
    res["loadavg_after"] = machine.loadavg()
    print(f"## The output axis ({env['nproc']} CPUs, {env['cpu']}, {env['mem_gib']} GiB; "
          f"{env['binary']}, sha256 {res['binary_sha256'][:12]}; this checkout at {env['commit']})")
    print()
    print(f"Before the run the CPUs were {100 * res['idle_before']:.0f}% idle; load average "
          f"{res['loadavg_before']} before, {res['loadavg_after']} after. {args.rounds} round(s).")
    print()
    print("\n".join(output_report.tables(res["output"])))
    cli.finish(args, "output", res, output_report.figures(res["output"]), env, inline="output")
    print(f"\n(elapsed {res['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
