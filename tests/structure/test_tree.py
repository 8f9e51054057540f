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
    "server/kb_server.c",
    "server/kb_http.c",
    "service/engine/*",
    "service/durable/*",
    "service/run/kb_run.c",
    "kernel/kb_kernel.c",
    "kernel/kb_kernel_adopt.c",
    "kernel/kb_kernel_io.c",
    "wire/kb_wire.c",
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


# No allocation result used unchecked (docs/ARCHITECTURE.md, "Memory"): a
# heuristic right on this code. For `X = malloc|calloc|...(...)` one of the
# next statements of the same function tests X (`!X`, `X == NULL`, `if (X)`,
# `while (X)`, `X ?`, `KB_NOT_NULL(X)`), returns it to a caller that checks,
# or hands it to kb_strv_push (which takes NULL as out of memory); an
# assignment inside a condition (`if (!(X = strdup(s)))`) is its own test.
# kb_xcalloc/kb_xstrdup never return NULL and are not matched. Files not yet
# swept are listed here; the list empties as they are.
ALLOC_PENDING = [
    "service/engine/*",
    "service/durable/*",
    "kernel/*",
    "state/*",
    "wire/*",
    "cli/*",
    "server/kb_server.c",
    "server/kb_http.*",
    "server/kb_mhd_errors.c",
    "server/kb_conns.*",
]
ALLOCATORS = "malloc|calloc|realloc|strdup|strndup|zlistx_new|zhashx_new|zlist_new|zhash_new"
ALLOCATION = re.compile(r"(?P<before>[(!]?)\s*(?P<target>[A-Za-z_][\w.>\[\]-]*)\s*=(?!=)[^;=]*?"
                        rf"\b(?:{ALLOCATORS})\s*\(")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
CHECK_WITHIN = 20  # statements after the allocation's own


def unchecked_allocations(text):
    """[(line, target)] of each allocation in C text whose result is not
    tested within CHECK_WITHIN statements of the same function."""
    text = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    found = []
    for m in ALLOCATION.finditer(text):
        if m.group("before"):
            continue
        end = m.end()
        for _ in range(CHECK_WITHIN + 1):
            end = text.find(";", end + 1)
            if end < 0:
                break
        body_end = text.find("\n}", m.end())
        window = text[m.end():min(x for x in (end, body_end, len(text)) if x >= 0)]
        x = re.escape(m.group("target")) + r"(?!\s*(?:->|\.|\[|\w))"
        tests = [rf"!\s*\*?{x}", rf"{x}\s*==\s*NULL", rf"\b(?:if|while)\s*\(\s*{x}\s*\)",
                 rf"{x}\s*\?", rf"KB_NOT_NULL\(\s*{x}\s*\)", rf"\breturn\s+{x}\s*;",
                 rf"\bkb_strv_push\([^;]*\b{x}\s*\)"]
        if not any(re.search(test, window) for test in tests):
            found.append((text.count("\n", 0, m.start("target")) + 1, m.group("target")))
    return found


def test_allocation_checker_sees_unchecked_ones():
    unchecked = ("void f(void)\n{\n    char *p = malloc(4);\n    p[0] = 0;\n}\n"
                 "void g(t *self)\n{\n    self->ab = strdup(\"x\");\n    if (!self->abc)\n"
                 "        return;\n}\n"
                 "void h(t *self)\n{\n    self->q = zlistx_new();\n    if (!self)\n        return;\n}\n"
                 "void i(t *self)\n{\n    self->q = zhashx_new();\n}\n"
                 "void j(t *self)\n{\n    if (!self->q)\n        return;\n}\n")
    assert unchecked_allocations(unchecked) == [
        (3, "p"), (8, "self->ab"), (14, "self->q"), (20, "self->q")]
    checked = ("t *f(void)\n{\n    t *self = calloc(1, sizeof *self);\n    if (!self)\n"
               "        return NULL;\n    self->a = strdup(\"a\");\n    self->b = strndup(\"b\", 1);\n"
               "    self->c = kb_xcalloc(1, 2);\n    if (!self->a || self->b == NULL)\n"
               "        return NULL;\n    self->d = zlistx_new();\n    KB_NOT_NULL(self->d);\n"
               "    char *e = ok ? strdup(\"e\") : NULL;\n    if (e)\n        free(e);\n"
               "    if (!(self->g = malloc(3)))\n        return NULL;\n"
               "    char *h = realloc(self->a, 9);\n    return h;\n}\n"
               "int k(char **out, kb_strv_t *v)\n{\n    *out = strdup(\"k\");\n    if (!*out)\n"
               "        return -1;\n    char *d = strdup(\"d\");\n    if (kb_strv_push(v, d))\n"
               "        return -1;\n    char *b = malloc(2);\n    while (b) {\n    }\n}\n"
               "/* x = malloc(1); */\n")
    assert unchecked_allocations(checked) == []


def test_no_allocation_result_used_unchecked():
    unchecked = []
    for path in sorted(SRC.rglob("*.c")):
        name = str(path.relative_to(SRC))
        if any(Path(name).match(pattern) for pattern in ALLOC_PENDING):
            continue
        unchecked += [f"{name}:{line} {target}"
                      for line, target in unchecked_allocations(path.read_text())]
    assert not unchecked, unchecked
