#!/usr/bin/python3
"""The output axis: runs that print a lot, against the daemon's bounds.

    /usr/bin/python3 bench/output.py [--rounds N] [--parts rate,single,concurrent,stall]
        [--binary PATH] [--json FILE] [--memory-bound GIB]

One part after the other, each on a `kernelbridge serve` of its own
(`--pool python=0`, 127.0.0.1, ephemeral port, private state dir), each for
N rounds (default 3; kbbench/output_axis.py says how each figure is taken):

  rate        100 MiB printed through `POST /run` (plain JSON, read fully;
              `--max-output 200M`) vs the raw ZeroMQ client on a kernel of
              the same kernelspec, as one stream message and flushed every
              1 MiB: MB/s each, daemon / raw (target at least 80%)
  single      one 200 MiB run at the default 64 MiB cap, chunked and as one
              message: the daemon's peak RSS − idle (target cap + 32 MiB),
              `truncated: true` and stdout exactly 64 MiB
  concurrent  four 200 MiB runs at once on four contexts and connections
              (`--max-output-memory 256M` if the daemon has it): peak RSS −
              idle (target 256 + 64 MiB); then every record deleted and the
              RSS followed for 5 s (target: back within idle + 16 MiB)
  stall       an SSE reader of a 200 MiB run that stops reading for 10 s:
              peak RSS − idle (target: the cap) and whether `result` came

Prints Markdown tables and a verdict per target. The bench's own memory
(this process, the daemon, the kernels) is kept under --memory-bound
(default 3 GiB): over it, the daemon and its kernels are killed and the part
fails. Every process started is stopped at the end, also on error or Ctrl-C.
"""

import argparse
import atexit
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, NoReturn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from kbbench import machine, output_axis, output_report, peers  # noqa: E402

PARTS = ("rate", "single", "concurrent", "stall")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each part (default 3)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"a subset of {','.join(PARTS)}")
    ap.add_argument("--binary", default=os.environ.get(
        "KB_BINARY", os.path.join(ROOT, "build", "kernelbridge")))
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--memory-bound", type=float, default=3.0, metavar="GIB",
                    help="kill the daemon and its kernels when the bench's RSS passes this (default 3)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    parts = tuple(p for p in args.parts.split(",") if p)
    if not set(parts) <= set(PARTS) or not parts:
        sys.exit(f"--parts: a subset of {','.join(PARTS)}")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"{args.binary}: no binary (cmake -S . -B build && cmake --build build "
                 "--target kernelbridge_cli)")
    avail = machine.mem_available_kib()
    if avail < args.memory_bound * 1024 * 1024 * 1.2:
        sys.exit(f"{avail // 1024} MiB available: too little for a bound of {args.memory_bound} GiB")

    tmp = tempfile.mkdtemp(prefix="kbo", dir="/tmp")  # short: ipc path limits

    def cleanup() -> None:
        peers.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)

    def on_signal(*_: object) -> NoReturn:
        sys.exit(130)

    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    machine.private_environment(tmp)  # only the flags configure the daemon

    t_start = time.perf_counter()
    res: dict[str, Any] = {"env": machine.environment(args.binary, ROOT),
                           "loadavg_before": machine.loadavg(), "idle_before": machine.cpu_idle(2.0)}
    # a copy: every part runs the same build, also if ./build is rebuilt meanwhile
    binary = os.path.join(tmp, "kernelbridge")
    shutil.copy2(args.binary, binary)
    with open(binary, "rb") as fb:
        res["binary_sha256"] = hashlib.sha256(fb.read()).hexdigest()
    try:
        res["output"] = output_axis.measure(binary, tmp, args.rounds, args.seed,
                                            args.memory_bound, log, parts)
    finally:
        cleanup()
    res["elapsed_s"] = time.perf_counter() - t_start
    res["loadavg_after"] = machine.loadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)

    env = res["env"]
    lines, verdicts = output_report.report(res["output"])
    print(f"## The output axis ({env['nproc']} CPUs, {env['cpu']}, {env['mem_gib']} GiB; "
          f"{env['binary']}, sha256 {res['binary_sha256'][:12]}; this checkout at {env['commit']})")
    print()
    print(f"Before the run the CPUs were {100 * res['idle_before']:.0f}% idle; load average "
          f"{res['loadavg_before']} before, {res['loadavg_after']} after. {args.rounds} round(s).")
    print()
    print("\n".join(lines))
    print("### Targets (SPEC §7, the output axis)")
    print()
    print("\n".join(output_report.targets_table(verdicts)))
    print(f"\n(elapsed {res['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
