"""The shape of the C tree that docs/ARCHITECTURE.md promises: each layer
includes only the layers below it (and src/util), src/service has no
include cycle, and no file under src/ is over 900 lines."""

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
LAYERS = ["util", "wire", "kernel", "state", "service", "server", "cli"]
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def modules():
    """{module: set of modules it includes}, a module being a .c/.h pair."""
    graph = {}
    for path in sorted(SRC.rglob("*.[ch]")):
        name = str(path.relative_to(SRC).with_suffix(""))
        here = str(path.parent.relative_to(SRC))
        deps = graph.setdefault(name, set())
        for target in INCLUDE.findall(path.read_text()):
            if target.startswith("kernelbridge"):
                continue
            dep = target.rsplit(".", 1)[0]
            if "/" not in dep:  # beside the including file
                dep = f"{here}/{dep}"
            if dep != name:
                deps.add(dep)
    return graph


def test_layers_include_only_what_is_below_them():
    wrong = []
    for name, deps in modules().items():
        layer = LAYERS.index(name.split("/")[0])
        for dep in deps:
            below = dep.split("/")[0]
            assert below in LAYERS, f"{name} includes {dep}, which is in no layer"
            if LAYERS.index(below) > layer:
                wrong.append(f"{name} -> {dep}")
    assert not wrong, wrong


def test_service_has_no_include_cycle():
    graph = {n: {d for d in deps if d.startswith("service/")}
             for n, deps in modules().items() if n.startswith("service/")}
    state, cycles = {}, []

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_every_source_file_is_seen():
    """The recursive walk finds every C file under src/ that git knows."""
    names = {str(p.relative_to(SRC)) for p in SRC.rglob("*.[ch]")}
    assert len(names) > 100 and "service/engine/kb_engine.c" in names


def test_no_source_file_is_over_900_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.[ch]")
            if (n := len(p.read_text().splitlines())) > 900}
    assert not long, long
