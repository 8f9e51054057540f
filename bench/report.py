#!/usr/bin/python3
"""The benchmarks' report: each results file's figures next to its targets.

    /usr/bin/python3 bench/report.py [RESULTS.json ...] [--write-docs docs/PERFORMANCE.md]
        [--check]

Prints, for each results file (default: every bench/results/*.json), a
table `figure | measured | target | pass/fail` (targets: bench/targets.py).
With --write-docs, rewrites only the generated blocks of that document,
each between `<!-- bench:<concept>:begin -->` and `<!-- bench:<concept>:end -->`,
and leaves every other line as it is. With --check, writes nothing and
exits 1 if a generated block differs from what the results give.
"""

import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from kbbench import report, results  # noqa: E402


def source_name(path: str) -> str:
    """A results file's path as the doc names it: from the repository's root."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else path


def render_all(paths: list[str]) -> dict[str, str]:
    """{concept: its generated block}, in the order given."""
    blocks = {}
    for path in paths:
        doc = results.load(path)
        blocks[doc["concept"]] = report.block(doc, source_name(path))
    return blocks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", help="results files (default: bench/results/*.json)")
    ap.add_argument("--write-docs", metavar="DOC", help="rewrite the generated blocks of DOC")
    ap.add_argument("--check", action="store_true",
                    help="with --write-docs: only say whether DOC is up to date")
    args = ap.parse_args(argv)
    paths = args.results or sorted(glob.glob(os.path.join(results.RESULTS_DIR, "*.json")))
    blocks = render_all(paths)
    if not args.write_docs:
        for concept, body in blocks.items():
            print(f"## {concept}\n\n{body}\n")
        return 0
    with open(args.write_docs) as f:
        text = f.read()
    new, missing = report.replace_blocks(text, blocks)
    for concept in missing:
        print(f"{args.write_docs}: no markers for {concept}: block not written", file=sys.stderr)
    if args.check:
        stale = new != text
        print(f"{args.write_docs}: {'out of date' if stale else 'up to date'}")
        return 1 if stale or missing else 0
    if new != text:
        with open(args.write_docs, "w") as f:
            f.write(new)
    print(f"{args.write_docs}: {len(blocks) - len(missing)} block(s) written")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
