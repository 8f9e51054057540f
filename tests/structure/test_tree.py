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


# No function over 100 lines and no file over 800 (issue 31). Files not yet
# brought under these limits are listed here; the list empties as they are,
# and then the check covers all of src/ and replaces the 900-line one above.
ALLOWED_PENDING = [
    "server/*",
    "service/engine/*",
    "service/durable/*",
    "service/run/kb_run.c",
    "kernel/kb_kernel.c",
    "kernel/kb_kernel_adopt.c",
    "kernel/kb_kernel_io.c",
]
MAX_FUNCTION_LINES = 100
MAX_FILE_LINES = 800
DEFINITION = re.compile(r"^(?!typedef\b|struct\b|enum\b|union\b|#)[A-Za-z_][^;]*\(")


def pending(name):
    return any(Path(name).match(pattern) for pattern in ALLOWED_PENDING)


def functions(text):
    """[(name, first line, lines)] of each function defined in C text, a
    definition being a line at column 0 with a '(' followed by a '{' alone
    at column 0, its body ending at the first '}' alone at column 0."""
    found, candidate, start = [], None, None
    for number, line in enumerate(text.splitlines(), 1):
        if start is None and DEFINITION.match(line):
            candidate = (re.search(r"(\w+)\s*\(", line).group(1), number)
        elif start is None and line == "{" and candidate:
            start = candidate
        elif start is not None and line == "}":
            found.append((start[0], start[1], number - start[1] + 1))
            start = candidate = None
    return found


def test_function_finder_sees_definitions():
    text = ("static int\n" "f(int a,\n" "  int b)\n" "{\n" "    return a;\n" "}\n"
            "int g(void)\n" "{\n" "    if (1) {\n" "    }\n" "}\n")
    assert functions("int f(int a,\n      int b)\n{\n    return a;\n}\n") == [("f", 1, 5)]
    assert [name for name, _, _ in functions(text)] == ["f", "g"]


def test_no_function_over_100_lines_and_no_file_over_800():
    long_functions, long_files = [], {}
    for path in sorted(SRC.rglob("*.[ch]")):
        name = str(path.relative_to(SRC))
        if pending(name):
            continue
        text = path.read_text()
        if (n := len(text.splitlines())) > MAX_FILE_LINES:
            long_files[name] = n
        long_functions += [f"{name}:{line} {fn} ({n} lines)"
                           for fn, line, n in functions(text) if n > MAX_FUNCTION_LINES]
    assert not long_functions and not long_files, (long_functions, long_files)


# One error convention (issue 31): a function reports an error through a
# last `kb_error_t *err`, never through a (char *err, size_t errlen) pair.
# The functions listed here (kb_kernel.c, kb_kernel_adopt.c) keep the old
# pair for now; the list empties.
ERROR_PAIR_ALLOWED = [
    "kb_kernel_blank",
    "kb_kernel_new",
    "kb_kernel_adopt",
    "kb_kernel_connect_sockets",
    "kb_kernel_watch_process",
]
ERROR_PAIR = re.compile(r"\bchar\s*\*\s*(\w*(?:err|why|reason|fail)\w*)\s*,\s*size_t\s+\w+")


def error_pairs(text):
    """[(function, line)] of each declaration or definition in C text whose
    parameters hold a char * error buffer followed by its size_t length."""
    found = []
    for match in ERROR_PAIR.finditer(text):
        depth, at = 0, match.start()
        while at > 0:
            at -= 1
            if text[at] == ")":
                depth += 1
            elif text[at] == "(":
                if depth == 0:
                    break
                depth -= 1
        name = re.search(r"(\w+)\s*\)?\s*$", text[:at])
        found.append((name.group(1) if name else "?", text.count("\n", 0, match.start()) + 1))
    return found


def test_error_pair_finder_sees_parameters():
    text = ("int f(const char *a, char *err, size_t errlen);\n"
            "static int\n" "g(int x,\n" "  char *why, size_t why_size)\n" "{\n}\n"
            "void h(char *buf, size_t len);\n"
            "typedef int (*cb_fn)(void *arg, char *err, size_t errlen);\n")
    assert error_pairs(text) == [("f", 1), ("g", 4), ("cb_fn", 8)]


def test_one_error_convention():
    wrong = []
    for path in sorted(SRC.rglob("*.[ch]")):
        name = str(path.relative_to(SRC))
        wrong += [f"{name}:{line} {fn}" for fn, line in error_pairs(path.read_text())
                  if fn not in ERROR_PAIR_ALLOWED]
    assert not wrong, wrong
