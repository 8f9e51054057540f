"""The SDK's shape: layers without an import cycle, mypy --strict
clean, and a blocking API derived from the async one by one mechanism
(tools/gen_sync.py) rather than written twice."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from .kbsdk_testlib import SDK_DIR, SYSTEM_PYTHON

PACKAGE = SDK_DIR / "src" / "kernelbridge"
GENERATOR = SDK_DIR / "tools" / "gen_sync.py"

# The layers, lowest first: a module may import only modules before it.
LAYERS = [
    "_version",                 # the one version (CMakeLists.txt reads it too)
    "errors",                   # transport: the typed errors ...
    "_transport",               # ... HTTP/1.1 and SSE
    "types",                    # models: results, contexts, processes, the seed API's names
    "_endpoints",               # async service: the context and run endpoints ...
    "process",                  # ... processes
    "_async_code_interpreter",  # ... the earlier-style API
    "_routing",                 # ... the sandboxes of a service, placement
    "interpreter",              # ... AsyncInterpreterService
    "_runner",                  # sync service: the event loop thread and Blocking._call ...
    "sync",                     # ... the generated blocking classes
    "code_interpreter",         # names gathered
    "__init__",
]


def package_imports(package: Path) -> Dict[str, Set[str]]:
    """{module: package modules it imports}, from every import statement at any
    depth (function-level and TYPE_CHECKING ones included): ``from . import x``,
    ``from .x import y``, ``from kernelbridge.x import y``, ``import kernelbridge.x``."""
    modules = {p.stem for p in package.glob("*.py")}
    name = package.name
    graph: Dict[str, Set[str]] = {}
    for path in sorted(package.glob("*.py")):
        deps = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1, f"{path.name}: import from outside the package: {ast.unparse(node)}"
                if node.level == 1:
                    base: Optional[str] = node.module
                elif node.module == name or (node.module or "").startswith(name + "."):
                    base = node.module.partition(".")[2] or None if node.module else None
                else:
                    continue
                if base is None:  # from . import x: x is a module, or a name of __init__
                    targets = [a.name if a.name in modules else "__init__" for a in node.names]
                else:
                    targets = [base.split(".")[0]]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == name:
                        targets.append("__init__")
                    elif alias.name.startswith(name + "."):
                        targets.append(alias.name.split(".")[1])
            deps.update(targets)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle of ``graph`` as a path (first == last), or None."""
    state: Dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "kernelbridge"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import y\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n    import kernelbridge.d\n")
    (pkg / "c.py").write_text("from kernelbridge.a import x\n")
    (pkg / "d.py").write_text("from . import VERSION\n")
    graph = package_imports(pkg)
    assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"__init__"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_sdk_has_no_import_cycle():
    graph = package_imports(PACKAGE)
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_each_layer_imports_only_layers_below():
    graph = package_imports(PACKAGE)
    assert set(graph) == set(LAYERS), "a module was added or removed: place it in LAYERS"
    wrong = [f"{module} -> {dep}" for module, deps in graph.items() for dep in deps
             if LAYERS.index(dep) >= LAYERS.index(module)]
    assert not wrong, wrong
    assert graph["types"] == set(), "the models import nothing from the package"
    assert graph["_runner"] == set(), "the blocking mechanism knows no class of the package"


def test_mypy_strict_is_clean(tmp_path):
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(PACKAGE)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert "No module named mypy" not in proc.stderr, "install python3-mypy (scripts/setup.sh)"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_generator_is_mypy_strict_clean(tmp_path):
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(GENERATOR)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sync_module_is_generated_from_the_async_classes():
    """sync.py is exactly what tools/gen_sync.py makes of the async classes today."""
    proc = subprocess.run([SYSTEM_PYTHON, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# -- no function body written twice --------------------------------------------

MIN_LINES = 6


class _AsAsync(ast.NodeTransformer):
    """Fold the async spelling onto the sync one, so that a blocking copy of an
    async body (the same code without ``await``) compares equal to it."""

    def visit_Await(self, node: ast.Await) -> ast.AST:
        return self.visit(node.value)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> ast.AST:
        return self.visit(ast.For(node.target, node.iter, node.body, node.orelse, node.type_comment))

    def visit_AsyncWith(self, node: ast.AsyncWith) -> ast.AST:
        return self.visit(ast.With(node.items, node.body, node.type_comment))

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name(node.id.removeprefix("Async"), node.ctx)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        attr = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}.get(node.attr, node.attr)
        return ast.Attribute(self.visit(node.value), attr, node.ctx)


def function_bodies(sources: Dict[str, str]) -> Iterator[Tuple[str, int, str]]:
    """(where, lines, normalised dump) of every function body (docstring left out)."""
    for filename, text in sources.items():
        tree = ast.parse(text, filename)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            if not body:
                continue
            lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1
            folded = _AsAsync().visit(ast.Module(body=[ast.fix_missing_locations(b) for b in body], type_ignores=[]))
            yield f"{filename}:{node.name}:{node.lineno}", lines, ast.dump(folded, include_attributes=False)


def duplicated_bodies(sources: Dict[str, str]) -> List[List[str]]:
    seen: Dict[str, List[str]] = {}
    for where, lines, dump in function_bodies(sources):
        if lines >= MIN_LINES:
            seen.setdefault(dump, []).append(where)
    return [places for places in seen.values() if len(places) > 1]


def test_duplicate_finder_finds_a_hand_mirrored_method():
    async_source = (
        "class AsyncThing:\n"
        "    async def fetch(self, key):\n"
        "        value = await self._get(key)\n"
        "        if value is None:\n"
        "            raise KeyError(key)\n"
        "        async with self._lock:\n"
        "            self._seen.add(key)\n"
        "        return value\n")
    sync_source = async_source.replace("async def", "def").replace("await ", "").replace(
        "async with", "with").replace("AsyncThing", "Thing")
    assert duplicated_bodies({"a.py": async_source, "s.py": sync_source}) == [["a.py:fetch:2", "s.py:fetch:2"]]
    shorter = "def fetch(self, key):\n    return self._call(self._impl.fetch, key=key)\n"
    assert duplicated_bodies({"a.py": async_source, "s.py": shorter}) == []


def test_no_function_body_of_six_lines_is_written_twice():
    sources = {p.name: p.read_text() for p in sorted(PACKAGE.glob("*.py"))}
    assert not duplicated_bodies(sources)


def test_blocking_methods_are_one_call_through_the_runner():
    """Every body in sync.py is one call through Blocking (or returns self):
    nothing of the async logic is repeated there."""
    tree = ast.parse((PACKAGE / "sync.py").read_text())
    allowed_calls = {"_call", "_wrap", "_close", "__init__", "close"}
    checked = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        checked += 1
        body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
        assert len(body) <= 2, f"sync.{node.name}: {len(body)} statements"
        calls = [c for c in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Attribute)]
        if not calls:
            assert ast.unparse(body[0]) == "return self", f"sync.{node.name}"
            continue
        assert calls[0].func.attr in allowed_calls, f"sync.{node.name}: {ast.unparse(calls[0])}"
    assert checked > 30


@pytest.mark.parametrize("name", ["InterpreterService", "InterpreterContext", "ProcessService", "ProcessHandle",
                                  "CodeInterpreter"])
def test_every_public_async_member_has_its_blocking_twin(name):
    import kernelbridge

    sync_class = getattr(kernelbridge, name)
    async_class = getattr(kernelbridge, "Async" + name)
    renamed = {"aclose": "close"}
    skipped = {"bind", "bound", "transport", "from_json"}  # async-only by design
    public = {m for m in dir(async_class) if not m.startswith("_")} - skipped
    missing = {renamed.get(m, m) for m in public} - set(dir(sync_class))
    assert not missing, f"{name} lacks {missing}"
