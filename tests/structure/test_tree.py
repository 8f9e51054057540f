"""The shape of the C tree that docs/ARCHITECTURE.md promises: each layer
includes only the layers below it (and src/util), src/service has no
include cycle and no call cycle between its files, the engine's and the
kernel's structs are written only where the table of who writes what
says, no function under src/ is over 100 lines and no file over 800, one
error convention, and no allocation result used unchecked."""

import re
import shutil
import subprocess
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
    cycles = cycles_of(graph)
    assert not cycles, cycles


def test_every_source_file_is_seen():
    """The recursive walk finds every C file under src/ that git knows."""
    names = {str(p.relative_to(SRC)) for p in SRC.rglob("*.[ch]")}
    assert len(names) > 100 and "service/engine/kb_engine.c" in names


# No function over 100 lines and no file over 800 in src/.
MAX_FUNCTION_LINES = 100
MAX_FILE_LINES = 800
DEFINITION = re.compile(r"^(?!typedef\b|struct\b|enum\b|union\b|#)[A-Za-z_][^;]*\(")


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
        text = path.read_text()
        if (n := len(text.splitlines())) > MAX_FILE_LINES:
            long_files[name] = n
        long_functions += [f"{name}:{line} {fn} ({n} lines)"
                           for fn, line, n in functions(text) if n > MAX_FUNCTION_LINES]
    assert not long_functions and not long_files, (long_functions, long_files)


# ---- the call graph of src/service, and who writes what ----------------------------

ROOT = SRC.parent
CTAGS = shutil.which("ctags-universal") or shutil.which("ctags")
CALLEE = re.compile(r"\b([A-Za-z_]\w*)\b")


def _blank(match):
    """A comment or a literal as spaces, its newlines kept (lines stay put)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def _code(path):
    """path's text without comments, strings and character literals."""
    text = path.read_text()
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  _blank, text, flags=re.S)


def _functions(files):
    """[(name, file, first line, last line, static)] of every function
    defined in files, as universal-ctags sees them."""
    assert CTAGS, "ctags (universal-ctags) is needed: scripts/setup.sh installs it"
    out = subprocess.run([CTAGS, "--fields=+nef", "--c-kinds=f", "--language-force=C",
                          "-o", "-", *map(str, files)],
                         check=True, capture_output=True, text=True, cwd=ROOT).stdout
    found = []
    for line in out.splitlines():
        name, file, _, *rest = line.split("\t")
        fields = dict(f.split(":", 1) for f in rest if ":" in f)
        found.append((name, str(Path(file).resolve().relative_to(SRC)), int(fields["line"]),
                      int(fields.get("end", fields["line"])), "file" in fields))
    return found


def call_graph(folder="service"):
    """{file: {file it calls or takes a function of}} between the .c files
    under src/<folder>: a function defined (not static) in one file and
    named in the body of a function of another."""
    files = sorted((SRC / folder).rglob("*.c"))
    functions = _functions(files)
    home = {name: file for name, file, _, _, static in functions if not static}
    graph = {str(f.relative_to(SRC)): set() for f in files}
    lines = {f: _code(SRC / f).splitlines() for f in graph}
    for name, file, first, last, _ in functions:
        body = "\n".join(lines[file][first - 1:last])
        for word in set(CALLEE.findall(body)) - {name}:
            callee = home.get(word)
            if callee and callee != file:
                graph[file].add(callee)
    return graph


def cycles_of(graph):
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
    return cycles


def test_service_has_no_call_cycle():
    """No file of src/service calls (or hands out a function of) a file
    that calls it back, however long the way round."""
    graph = call_graph("service")
    assert graph["service/engine/kb_dispatch.c"], "the call graph is empty: ctags saw nothing"
    assert not cycles_of(graph), cycles_of(graph)


def writers_declared():
    """{struct: set of file names} from the "written by" column of
    docs/ARCHITECTURE.md's table of who writes what."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = doc[doc.index("## Who writes what"):]
    declared = {}
    for row in re.findall(r"^\| `struct (\w+)` \|.*\| ([^|]+) \|$", table, re.M):
        declared[row[0]] = set(re.findall(r"`(kb_\w+\.c)`", row[1]))
    return declared


def _struct_sources():
    return (sorted((SRC / "service").rglob("*.[ch]")) + sorted((SRC / "kernel").rglob("*.[ch]")))


def _embedders(struct):
    """[(struct, typedef, member)] of the structs of src/service and
    src/kernel that hold struct by value in a member."""
    texts = [_code(path) for path in _struct_sources()]
    typedefs = dict(re.findall(r"typedef struct (kb_\w+) (\w+);", "\n".join(texts)))
    found = []
    for text in texts:
        for outer, body in re.findall(r"^struct (kb_\w+) \{(.*?)^\};", text, re.S | re.M):
            for member in re.findall(rf"^\s*struct\s+{struct}\s+(\w+)\s*;", body, re.M):
                found.append((outer, typedefs.get(outer), member))
    return found


def writers_found(struct, typedef):
    """{file: fields} of struct written (x->field =, +=, ++, ..., or a czmq
    container x->field changed in place) in each .c file of src/service and
    src/kernel: x a parameter or a local of type struct * (or typedef *) in
    that function, or a field of that type of a struct of the file (a
    chain like self->engine->stopping). A struct held by value in another
    (struct kb_kernel's io) is written through it (self->io.control =):
    that write is the held struct's, not the holder's."""
    files = [p for p in _struct_sources() if p.suffix == ".c"]
    # (struct, typedef, prefix of a field of struct after the variable)
    ways = [(struct, typedef, "->")] + [
        (outer, outer_typedef, rf"->{member}\.") for outer, outer_typedef, member in _embedders(struct)]
    held = {member for _, member in _held_by(struct)}
    found = {}
    for name, file, first, last, _ in _functions(files):
        text = _code(SRC / file)
        structs = "\n".join(re.findall(r"^struct \w+ \{.*?^\};", text, re.S | re.M))
        body = "\n".join(text.splitlines()[first - 1:last])
        for outer, outer_typedef, prefix in ways:
            types = rf"struct\s+{outer}" + (rf"|\b{outer_typedef}" if outer_typedef else "")
            decl = re.compile(rf"(?:{types})\s*\*\s*(\w+)")
            for var in set(decl.findall(body)) | set(decl.findall(structs)):
                at = rf"(?<![\w.])(?:\w+(?:->|\.))*{var}{prefix}"
                write = re.compile(rf"{at}(\w+)(?P<rest>(?:\[[^]\n]*\]|\.\w+)*)"
                                   rf"\s*(?:=(?!=)|[-+*/|&^]=|\+\+|--)|(?:\+\+|--){at}(\w+)(?P<rest2>)")
                # a czmq container of the struct changed in place is written too
                change = re.compile(rf"\b(?:zhashx|zlistx)_(?:insert|update|delete|purge|add_\w+|"
                                    rf"detach|move_\w+|set_\w+)\(\s*{at}(\w+)(?P<rest>)")
                for m in list(write.finditer(body)) + list(change.finditer(body)):
                    field = m.group(1) or m.group(3)
                    rest = m.groupdict().get("rest") or m.groupdict().get("rest2") or ""
                    if field in held and rest.startswith("."):
                        continue  # a write of the struct held in that field
                    found.setdefault(Path(file).name, set()).add(field)
    return found


def _held_by(struct):
    """[(struct, member)] of the structs struct holds by value."""
    held = []
    for path in _struct_sources():
        for body in re.findall(rf"^struct {struct} \{{(.*?)^\}};", _code(path), re.S | re.M):
            held += re.findall(r"^\s*struct\s+(kb_\w+)\s+(\w+)\s*;", body, re.M)
    return held




def test_every_struct_has_one_declared_writer():
    """Each struct of the table of who writes what is written by one file
    only, the one the table names (a struct no function writes through a
    pointer, only its constructor whole, has no write to find)."""
    declared = writers_declared()
    written = 0
    for struct in sorted(declared):
        typedef = f"{struct}_t"
        assert len(declared.get(struct, ())) == 1, \
            f"docs/ARCHITECTURE.md names not one writer of struct {struct}: {declared.get(struct)}"
        found = writers_found(struct, typedef)
        written += bool(found)
        stray = {f: sorted(fields) for f, fields in found.items() if f not in declared[struct]}
        assert not stray, f"struct {struct} is written outside {sorted(declared[struct])}: {stray}"
    assert written >= 25, f"writes found of only {written} structs: the scan is broken"


def test_every_struct_has_a_declared_writer():
    """Every struct defined in src/service and src/kernel has a row in the
    table of who writes what."""
    defined = set()
    for path in list((SRC / "service").rglob("*.[ch]")) + list((SRC / "kernel").rglob("*.[ch]")):
        defined |= set(re.findall(r"^(?:typedef )?struct (kb_\w+) \{", path.read_text(), re.M))
    missing = defined - set(writers_declared())
    assert not missing, sorted(missing)




# One error convention: a function reports an error through a
# last `kb_error_t *err`, never through a (char *err, size_t errlen) pair.
ERROR_PAIR_ALLOWED: list[str] = []
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




# No allocation result used unchecked (docs/ARCHITECTURE.md, "Memory"): a
# heuristic right on this code. For `X = malloc|calloc|...(...)` one of the
# next statements of the same function tests X (`!X`, `X == NULL`, `if (X)`,
# `while (X)`, `X ?`, `KB_NOT_NULL(X)`), returns it to a caller that checks,
# or hands it to kb_strv_push (which takes NULL as out of memory); an
# assignment inside a condition (`if (!(X = strdup(s)))`) is its own test.
# kb_xcalloc/kb_xstrdup never return NULL and are not matched. Every file of
# src/ is checked: a file may be listed here only while it is brought under
# the policy.
ALLOC_PENDING: list[str] = []
ALLOCATORS = ("malloc|calloc|realloc|strdup|strndup|zsys_sprintf|zlistx_new|zhashx_new|zlist_new|"
              "zhash_new")
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
                 "void j(t *self)\n{\n    if (!self->q)\n        return;\n}\n"
                 "void l(t *self)\n{\n    self->p = zsys_sprintf(\"%s/k\", self->d);\n}\n")
    assert unchecked_allocations(unchecked) == [
        (3, "p"), (8, "self->ab"), (14, "self->q"), (20, "self->q"), (29, "self->p")]
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
