"""The shape of bench/ that bench/README.md promises: files of at
most 400 lines and functions of at most 80, every module importable without
running anything, every target a row of bench/targets.py, and
docs/PERFORMANCE.md's generated tables exactly what the committed
bench/results/*.json render to."""

import ast
import importlib
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
DOC = REPO / "docs" / "PERFORMANCE.md"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 80
sys.path.insert(0, str(BENCH))

import targets  # noqa: E402
from kbbench import procs, report, results  # noqa: E402

FILES = sorted(p for p in BENCH.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
MODULES = sorted(p for p in BENCH.rglob("*.py") if "__pycache__" not in p.parts)
RESULTS = sorted((BENCH / "results").glob("*.json"))


@pytest.fixture(autouse=True, scope="module")
def _bench_off_the_path_afterwards():
    """bench/ on sys.path only for this module: its top-level names (run,
    report, pool, ...) are not other tests' to find."""
    yield
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
    for name, mod in list(sys.modules.items()):
        if str(getattr(mod, "__file__", "") or "").startswith(str(BENCH) + "/"):
            del sys.modules[name]


def test_no_bench_file_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in FILES
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, long


def test_no_bench_function_is_over_80_lines():
    long = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = n
    assert not long, long


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(BENCH)))
def test_every_bench_module_imports_without_running(path, capsys):
    rel = path.relative_to(BENCH).with_suffix("")
    if rel.parts[0] == "kbbench" and rel.name == "jupyter_server_launch":
        compile(path.read_text(), str(path), "exec")  # patches Jupyter Server when imported
        return
    importlib.import_module(".".join(rel.parts))
    out = capsys.readouterr()
    assert out.out == "" and out.err == "", f"{rel} printed on import: {out}"


def test_every_target_is_well_formed_and_unique():
    seen = set()
    for t in targets.TARGETS:
        assert t.op in report.OPS, t
        assert t.unit and t.name and t.section, t
        assert (t.concept, t.figure) not in seen, f"two targets read {t.concept}:{t.figure}"
        seen.add((t.concept, t.figure))
        if t.unit == "bool":
            assert isinstance(t.bound, bool), t
        else:
            assert isinstance(t.bound, (int, float)) and not isinstance(t.bound, bool), t


def _comparisons_with_numbers(path):
    """`x <= 150`-like comparisons of anything with a number other than 0 and 1."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            for side in (node.left, *node.comparators):
                if (isinstance(side, ast.Constant) and isinstance(side.value, (int, float))
                        and not isinstance(side.value, bool) and side.value not in (0, 1)):
                    found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_target_number_outside_targets_py():
    """Best effort: the report, the results and the figures' modules compare
    no figure with a number of their own; the checks go through targets.py.
    (Thresholds of method, such as when a machine counts as busy, are named
    constants of their modules and are not compared inline.)"""
    paths = [BENCH / "report.py", BENCH / "kbbench" / "report.py", BENCH / "kbbench" / "results.py",
             BENCH / "kbbench" / "cli.py", BENCH / "kbbench" / "output_report.py"]
    paths += [p for p in MODULES if re.search(r"^def figures\(", p.read_text(), re.M)]
    found = [f for p in sorted(set(paths)) for f in _comparisons_with_numbers(p)]
    assert not found, found
    for path in MODULES:  # the old verdict tables are gone: one targets table, the report's
        assert "verdicts.append" not in path.read_text(), path


def test_every_results_file_has_the_figures_its_targets_read():
    assert RESULTS, "no bench/results/*.json"
    for path in RESULTS:
        doc = results.load(str(path))
        assert path.stem == doc["concept"], path
        assert doc["measured"].get("commit") and doc["measured"].get("date"), path
        for t in report.targets_of(doc["concept"]):
            f = doc["figures"].get(t.figure)
            assert f is not None, f"{path.name}: no figure {t.figure}"
            assert f["unit"] == t.unit, (path.name, t.figure, f["unit"], t.unit)
        json.dumps(doc, allow_nan=False)


def test_the_doc_and_the_figures_never_disagree():
    """Rendering the committed results gives exactly the doc's generated blocks."""
    in_doc = report.blocks_in(DOC.read_text())
    rendered = {results.load(str(p))["concept"]: report.block(
        results.load(str(p)), f"bench/results/{p.name}") for p in RESULTS}
    assert set(in_doc) == set(rendered), (sorted(in_doc), sorted(rendered))
    for concept, block in rendered.items():
        assert in_doc[concept] == block, f"{concept}: run bench/report.py --write-docs {DOC}"


def test_run_slices_between_readings_leave_out_a_thread_that_ended():
    """A thread that ran and ended between two schedstat readings is left
    out of the slices between them (the difference of the totals goes
    negative); one born in between counts from 0."""
    def sleepy(n):
        for _ in range(n):
            time.sleep(0.001)

    gone = threading.Thread(target=sleepy, args=(200,))
    gone.start()
    time.sleep(0.05)  # it has run slices by now
    before = procs.schedstat(os.getpid())
    gone_tid = gone.native_id
    gone.join()
    release = threading.Event()
    born = threading.Thread(target=lambda: (sleepy(30), release.wait()))
    born.start()
    try:
        time.sleep(0.2)
        after = procs.schedstat(os.getpid())
    finally:
        release.set()
        born.join()
    assert gone_tid in before["slices_by_tid"] and gone_tid not in after["slices_by_tid"]
    assert after["slices"] - before["slices"] < procs.slices_between(before, after)
    assert procs.slices_between(before, after) >= 30  # the born thread's sleeps at least
