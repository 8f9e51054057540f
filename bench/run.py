#!/usr/bin/python3
"""Run several concepts' benchmarks one after the other, then the report.

    /usr/bin/python3 bench/run.py [--quick] [--concepts latency,overhead,pool,output]
        [--binary PATH] [--results-dir DIR] [--write-docs docs/PERFORMANCE.md]

Each concept is its own command (bench/README.md lists them); this runs
each in turn as a child process with --binary and, with --quick, its quick
settings (output: one round), each saving bench/results/<concept>.json (or
DIR/<concept>.json with --results-dir), then prints bench/report.py's
tables of those results and, with --write-docs, rewrites the document's
generated blocks from them.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kbbench import cli, results  # noqa: E402

COMMANDS = {  # concept: (command, its --quick flags)
    "latency": ("latency.py", ["--quick"]),
    "overhead": ("overhead.py", ["--quick"]),
    "pool": ("pool.py", ["--quick"]),
    "output": ("output.py", ["--rounds", "1"]),
    "scale": ("contexts.py", ["-n", "200", "--counts", "1,10"]),
    "e2b": ("e2b.py", ["-n", "100"]),
    "jupyter": ("jupyter_ws.py", ["-n", "200", "--wait-quiet", "0"]),
    "durability": ("durability.py", ["--rounds", "100", "--adopt", "1,10", "--cycles", "10"]),
    "limits": ("limits.py", ["--contexts", "10", "--idle", "5", "--rounds", "100",
                             "--targets", "3"]),
    "edges": ("edges.py", ["--rounds", "2"]),
    "bash": ("bash.py", ["-n", "100"]),
    "display": ("display.py", ["-n", "100"]),
    "fleet": ("fleet.py", ["--contexts", "30", "--dead-calls", "3"]),
    "fork": ("fork.py", ["-n", "5", "--sizes", "10,500"]),
    "mcp": ("mcp.py", ["-n", "100", "--stdio-rounds", "2"]),
    "cpu": ("cpu.py", ["-n", "100", "--callgrind-n", "30"]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="each concept's quick settings")
    ap.add_argument("--concepts", default="latency,overhead,pool,output",
                    help=f"a subset of {','.join(COMMANDS)}")
    ap.add_argument("--binary", default=cli.default_binary())
    ap.add_argument("--results-dir", default=results.RESULTS_DIR, metavar="DIR")
    ap.add_argument("--write-docs", metavar="DOC")
    args = ap.parse_args()
    binary = cli.check_binary(args.binary)
    concepts = [c for c in args.concepts.split(",") if c]
    unknown = set(concepts) - set(COMMANDS)
    if unknown:
        sys.exit(f"--concepts: unknown {', '.join(sorted(unknown))}")
    os.makedirs(args.results_dir, exist_ok=True)
    written, failed = [], []
    for concept in concepts:
        command, quick = COMMANDS[concept]
        path = os.path.join(args.results_dir, f"{concept}.json")
        argv = [sys.executable, os.path.join(HERE, command), "--binary", binary,
                "--results", path, *(quick if args.quick else [])]
        cli.log(f"run: {concept}: {' '.join(argv[1:])}")
        if subprocess.run(argv).returncode == 0:
            written.append(path)
        else:
            failed.append(concept)
    report = [sys.executable, os.path.join(HERE, "report.py"), *written]
    if args.write_docs and written:
        subprocess.run([*report, "--write-docs", args.write_docs], check=False)
    elif written:
        subprocess.run(report, check=False)
    if failed:
        cli.log(f"run: failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
