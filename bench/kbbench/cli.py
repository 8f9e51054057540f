"""What every bench command shares: its private temporary dir, the clean-up
of everything it started (also on error or Ctrl-C), the common flags, and
the end of a run: the figures saved as results (results.py), the old
`--json` figures, the targets table printed (report.py).

Results go to `--results PATH`, by default bench/results/<concept>.json,
which a new run overwrites; `--results none` writes none. A run given
`--json FILE` and no `--results` writes only FILE: the interface the
integration tests use for their few-round runs, which must not replace the
committed figures.
"""

import argparse
import atexit
import json
import os
import shutil
import signal
import sys
import tempfile
from typing import Any, NoReturn

from . import machine, procs, report, results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def default_binary() -> str:
    return os.environ.get("KB_BINARY", os.path.join(ROOT, "build", "kernelbridge"))


def add_common(ap: argparse.ArgumentParser, seed: bool = True) -> None:
    ap.add_argument("--binary", default=default_binary(),
                    help="kernelbridge binary (default: $KB_BINARY, else build/kernelbridge)")
    ap.add_argument("--results", metavar="PATH",
                    help="results file (default bench/results/<concept>.json; none: no file)")
    ap.add_argument("--json", metavar="FILE", help="also write the run's details to FILE")
    if seed:
        ap.add_argument("--seed", type=int, default=7)


def check_binary(binary: str) -> str:
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary}: no binary (cmake -S . -B build && cmake --build build "
                 "--target kernelbridge_cli)")
    return os.path.abspath(binary)


def setup(prefix: str, drop_kb: bool = True) -> str:
    """A private temporary dir (short: ipc path limits), removed at exit with
    every process started stopped first; SIGTERM and SIGINT exit cleanly;
    the kernels' per-user dirs pointed into it."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")

    def cleanup() -> None:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)

    def on_signal(*_: object) -> NoReturn:
        sys.exit(130)

    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    machine.private_environment(tmp, drop_kb=drop_kb)
    return tmp


def results_path(args: argparse.Namespace, concept: str) -> str | None:
    if args.results == "none":
        return None
    if args.results:
        return args.results
    return None if args.json else results.default_path(concept)


def finish(args: argparse.Namespace, concept: str, details: dict[str, Any],
           figures: results.Figures, env: dict[str, Any], note: str = "",
           inline: str | None = None) -> dict[str, Any]:
    """Save the run (results and --json) and print its targets table;
    details[inline], when named, is saved on one line."""
    doc = results.document(concept, figures, details, env, note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(details, f, indent=1, default=str)
    path = results_path(args, concept)
    if path:
        results.save(doc, path, inline)
        log(f"results: {path} (docs: /usr/bin/python3 bench/report.py --write-docs "
            "docs/PERFORMANCE.md)")
    print(f"\n### Targets ({concept})\n")
    print("\n".join(report.table(doc)))
    return doc
