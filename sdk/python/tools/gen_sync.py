#!/usr/bin/env python3
"""Generate kernelbridge/sync.py, the blocking API, from the async classes.

The async classes are the one definition. For each public member of each
class in CLASSES this writes its blocking twin: the same name (``aclose`` →
``close``, ``__aenter__``/``__aexit__`` → ``__enter__``/``__exit__``), the
same parameters and docstring, annotations with async types replaced by
their blocking ones (AsyncInterpreterContext → InterpreterContext,
AsyncIterator → Iterator, ...), and a body of one call through
``Blocking._call`` (kernelbridge/_runner.py), which runs the coroutine on the
private event loop thread and wraps what comes back. Properties and
dataclass fields become read-only properties.

    /usr/bin/python3 sdk/python/tools/gen_sync.py           # rewrite sync.py
    /usr/bin/python3 sdk/python/tools/gen_sync.py --check   # exit 1 if sync.py is stale

The SDK's tests run --check, so a change to an async signature that is not
regenerated fails CI rather than drifting.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kernelbridge"
TARGET = PACKAGE / "sync.py"
# Modules searched, in order, for the definition of a name used in a signature.
SOURCES = ["types", "process", "_async_code_interpreter", "_routing", "interpreter", "_runner"]
LINE = 110


@dataclass(frozen=True)
class Twin:
    module: str
    async_name: str
    name: str
    skip: Set[str] = field(default_factory=set)
    doc: Optional[str] = None       # class docstring; None: the async class's own
    init_from: Optional[str] = None  # the blocking type of the async __init__'s one parameter
    init_keywords: bool = False  # (impl, bridge), or the async __init__'s keyword-only parameters


CLASSES = [
    Twin("process", "AsyncProcessHandle", "ProcessHandle",
         doc="A blocking handle on one process record: logs, wait, kill, result."),
    Twin("process", "AsyncProcessService", "ProcessService",
         doc="The processes (run records) of one daemon, blocking."),
    Twin("types", "AsyncInterpreterContext", "InterpreterContext", skip={"bind", "bound"},
         doc="Serializable interpreter context handle (blocking).\n\n"
             "The same handle as AsyncInterpreterContext (``impl``); its calls block,\n"
             "and callbacks run in the calling thread."),
    Twin("_async_code_interpreter", "AsyncCodeInterpreter", "CodeInterpreter", init_from="InterpreterService",
         doc="Blocking CodeInterpreter: handles code execution within a sandbox. Currently supports only\n"
             "Python. Handlers are called in the calling thread as output arrives."),
    Twin("interpreter", "AsyncInterpreterService", "InterpreterService", skip={"transport"}, init_keywords=True,
         doc="Synchronous InterpreterService.\n\n"
             "Handles code execution in interpreter contexts of a kernelbridge\n"
             "daemon: each context is one Jupyter kernel, so the variables, imports\n"
             "and functions one run defines are there for the next run on the same\n"
             "context. Runs without a context use the default context of their\n"
             "language (``default-<language>``); ``isolated=True`` runs in a fresh\n"
             "kernel destroyed afterwards.\n"
             "\n"
             "Arguments:\n"
             "    base_url: the daemon's URL, e.g. ``http://127.0.0.1:8888``; with\n"
             "        ``sandboxes``, a template holding ``{sandbox_id}``.\n"
             "    token: the daemon's token, sent as ``Authorization: Bearer``.\n"
             "    sandboxes: ``{sandbox_id: url, ...}`` (or the sandbox ids of a\n"
             "        ``base_url`` template), to route each context to the daemon of\n"
             "        its sandbox.\n"
             "    connect_timeout: seconds a daemon may take to accept a connection\n"
             "        before SandboxUnavailable.\n"
             "    impl, bridge: an AsyncInterpreterService to wrap (instead of the\n"
             "        keyword arguments) and the event loop thread to run it on.\n"
             "\n"
             "Every method returns the models of the daemon's JSON (InterpreterResult,\n"
             "InterpreterContext, Checkpoint, ProcessRecord...), whose fields are\n"
             "those of the native API's OpenAPI document (``GET /openapi.json``), and\n"
             "raises the typed KernelBridgeError subclass of the daemon's error code\n"
             "(SessionNotFoundError for an unknown or vanished context,\n"
             "LanguageNotSupportedError, ContextExistsError, ...).\n"
             "\n"
             "Examples:\n"
             "    with InterpreterService(base_url=\"http://127.0.0.1:8888\") as svc:\n"
             "        ctx = svc.create_context(language=\"python\")\n"
             "        svc.run(\"x = 41\", context=ctx)\n"
             "        result = svc.run(\"x + 1\", context=ctx)\n"
             "        print(result.text)                 # 42\n"
             "        failed = svc.run(\"1/0\", context=ctx)\n"
             "        print(failed.error.name)           # ZeroDivisionError\n"
             "        svc.delete_context(ctx)\n"
             "\n"
             "Safe to share between threads: its calls run on one private event loop\n"
             "thread (SyncBridge) and go out in parallel over its connection pool;\n"
             "callbacks run in the calling thread. ``close()`` (or a ``with`` block)\n"
             "closes its connections and stops its event loop thread."),
]
RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
TYPES = {t.async_name: t.name for t in CLASSES} | {"AsyncIterator": "Iterator", "Awaitable": "Awaitable"}

HEADER = '''\
"""The blocking API: the async classes' twins, run on a private event loop thread.

GENERATED by sdk/python/tools/gen_sync.py from the async classes of
{sources};
do not edit: change the async class and run the generator (the tests check
that this file is current). Each method is one call through
``Blocking._call`` (_runner.py): the coroutine runs on the SyncBridge's loop, ``on_*`` callbacks are called
in the calling thread in event order, async iterators are stepped from
plain ones, and async handles that come back are wrapped into these
classes. Any number of threads may share one InterpreterService.
"""

from __future__ import annotations

'''

FOOTER = '''

SyncInterpreterService = InterpreterService
SyncInterpreterContext = InterpreterContext

__all__ = [
    "SyncBridge",
    "InterpreterService",
    "InterpreterContext",
    "SyncInterpreterService",
    "SyncInterpreterContext",
    "ProcessService",
    "ProcessHandle",
    "CodeInterpreter",
    "run_with_callbacks",
]
'''


class _RenameTypes(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(TYPES.get(node.id, node.id), node.ctx), node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str):  # a quoted forward reference
            text = re.sub(r"\b\w+\b", lambda m: TYPES.get(m.group(0), m.group(0)), node.value)
            return ast.copy_location(ast.Constant(text), node)
        return node


def _annotation(node: Optional[ast.expr], used: Set[str]) -> str:
    if node is None:
        return "Any"
    renamed = _RenameTypes().visit(copy.deepcopy(node))
    text = ast.unparse(renamed)
    used.update(re.findall(r"\b[A-Za-z_]\w*\b", text))
    return text


def _parameters(args: ast.arguments, used: Set[str]) -> List[str]:
    """``name: type = default`` of every parameter but self, in order, with * and **."""
    out: List[str] = []
    positional = args.posonlyargs + args.args
    defaults: List[Optional[ast.expr]] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        if i == 0:
            continue  # self
        out.append(_one(arg, default, used))
        if args.posonlyargs and arg is args.posonlyargs[-1]:
            out.append("/")
    if args.vararg is not None:
        out.append("*" + _one(args.vararg, None, used))
    elif args.kwonlyargs:
        out.append("*")
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(_one(arg, kw_default, used))
    if args.kwarg is not None:
        out.append("**" + _one(args.kwarg, None, used))
    return out


def _one(arg: ast.arg, default: Optional[ast.expr], used: Set[str]) -> str:
    text = f"{arg.arg}: {_annotation(arg.annotation, used)}"
    if default is None:
        return text
    if isinstance(default, ast.Constant) and isinstance(default.value, str) and default.value.isprintable():
        return f"{text} = {json.dumps(default.value)}"  # double quotes, as the sources write them
    used.update(n.id for n in ast.walk(default) if isinstance(n, ast.Name))  # a named default: import it
    return f"{text} = {ast.unparse(default)}"


def _arguments(args: ast.arguments) -> List[str]:
    """How the blocking method passes its parameters on: positional-only ones
    by position, the others by keyword."""
    out = [a.arg for a in args.posonlyargs[1:] if a.arg != "self"]
    out += [f"{a.arg}={a.arg}" for a in (args.args if args.posonlyargs else args.args[1:])]
    if args.vararg is not None:
        out.append(f"*{args.vararg.arg}")
    out += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg is not None:
        out.append(f"**{args.kwarg.arg}")
    return out


def _joined(head: str, items: Sequence[str], tail: str, indent: str) -> List[str]:
    """``head item, item tail`` on one line, or one item a line when too long."""
    one = f"{indent}{head}{', '.join(items)}{tail}"
    if len(one) <= LINE:
        return [one]
    close = tail.lstrip(")")
    return ([f"{indent}{head}"] + [f"{indent}    {item}," for item in items]
            + [f"{indent}){close}" if tail.startswith(")") else f"{indent}{tail}"])


def _docstring(text: Optional[str], indent: str) -> List[str]:
    if not text:
        return []
    assert '"""' not in text and "\\" not in text, text
    lines = text.splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return ([f'{indent}"""{lines[0]}'] + [f"{indent}{line}" if line else "" for line in lines[1:]]
            + [f'{indent}"""'])


def _is_property(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def _is_static_or_class(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in node.decorator_list)


def _is_async_generator(node: ast.AsyncFunctionDef) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(node))


def _property(name: str, annotation: Optional[ast.expr], doc: Optional[str], used: Set[str]) -> List[str]:
    kind = _annotation(annotation, used)
    return (["", "    @property", f"    def {name}(self) -> {kind}:"] + _docstring(doc, "        ")
            + [f"        value: {kind} = self._wrap(self._impl.{name})", "        return value"])


def _method(node: ast.FunctionDef | ast.AsyncFunctionDef, twin: Twin, used: Set[str]) -> List[str]:
    name = RENAMED.get(node.name, node.name)
    returns = _annotation(node.returns, used) if node.returns is not None else "None"
    if node.name == "__aenter__":
        returns = twin.name
    params = ["self"] + _parameters(node.args, used)
    out = [""] + _joined(f"def {name}(", params, f") -> {returns}:", "    ")
    out += _docstring(ast.get_docstring(node), "        ")
    if node.name == "__aenter__":
        return out + ["        return self"]
    if node.name == "__aexit__":
        return out + ["        self.close()"]
    if node.name == "aclose":
        return out + ["        self._close(self._impl.aclose)"]
    call = [f"self._impl.{node.name}"] + _arguments(node.args)
    if returns == "None":
        return out + _joined("self._call(", call, ")", "        ")
    return out + _joined(f"result: {returns} = self._call(", call, ")", "        ") + ["        return result"]


def _init(node: ast.FunctionDef, twin: Twin, used: Set[str]) -> List[str]:
    assert twin.init_from is not None and len(node.args.args) == 2, "one parameter besides self"
    param = node.args.args[1]
    used.add(twin.init_from)
    out = ["", f"    def __init__(self, {param.arg}: {twin.init_from}) -> None:"]
    out += _docstring(f"The blocking {twin.async_name} over ``{param.arg}``, on its event loop thread.", "        ")
    return out + [f"        super().__init__({twin.async_name}({param.arg}.impl), {param.arg}.bridge)"]


def _init_keywords(node: ast.FunctionDef, twin: Twin, used: Set[str]) -> List[str]:
    """A constructor taking the published ``(impl, bridge)``, or the async
    constructor's keyword-only parameters, which build the async object here
    (on a new SyncBridge when no bridge is given)."""
    args = node.args
    keywords = [_one(a, d, used) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    optional = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults)
                if isinstance(d, ast.Constant) and d.value is None]
    used.update({"Optional", twin.async_name})
    params = ["self", f"impl: Optional[{twin.async_name}] = None", "bridge: Optional[SyncBridge] = None", "*"]
    out = [""] + _joined("def __init__(", params + keywords, ") -> None:", "    ")
    out += _docstring(f"The blocking twin of ``impl``, or of the {twin.async_name} that the keyword\n"
                      "arguments describe (see its docstring).", "        ")
    build = [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    out += ["        if impl is None:"]
    out += _joined(f"impl = {twin.async_name}(", build, ")", "            ")
    out += [f"        elif {' or '.join(f'{name} is not None' for name in optional)}:",
            f'            raise TypeError("give impl or the keyword arguments of {twin.async_name}, not both")',
            "        super().__init__(impl, bridge if bridge is not None else SyncBridge())"]
    return out


def _class(tree: ast.Module, twin: Twin, used: Set[str]) -> List[str]:
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == twin.async_name]
    is_dataclass = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    used.add(twin.async_name)
    out = ["", "", f"@blocking_of({twin.async_name})",
           f"class {twin.name}(Blocking[{twin.async_name}]):"]
    out += _docstring(twin.doc if twin.doc is not None else ast.get_docstring(node), "    ")
    for member in node.body:
        if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name) and is_dataclass:
            name = member.target.id
            if not name.startswith("_") and name not in twin.skip:
                out += _property(name, member.annotation, None, used)
            continue
        if not isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) or member.name in twin.skip:
            continue
        if member.name == "__init__" and twin.init_from is not None:
            assert isinstance(member, ast.FunctionDef)
            out += _init(member, twin, used)
        elif member.name == "__init__" and twin.init_keywords:
            assert isinstance(member, ast.FunctionDef)
            out += _init_keywords(member, twin, used)
        elif member.name.startswith("_") and member.name not in RENAMED:
            continue
        elif _is_static_or_class(member):
            continue  # constructors of the async class (from_json, ...)
        elif isinstance(member, ast.FunctionDef) and _is_property(member):
            out += _property(member.name, member.returns, ast.get_docstring(member), used)
        else:
            if isinstance(member, ast.AsyncFunctionDef) and _is_async_generator(member):
                assert member.returns is not None and "AsyncIterator" in ast.unparse(member.returns), member.name
            out += _method(member, twin, used)
    return out


def _defined_names(tree: ast.Module) -> Set[str]:
    names: Set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _imports(used: Set[str], trees: Dict[str, ast.Module]) -> List[str]:
    by_module: Dict[str, Set[str]] = {}
    generated = {t.name for t in CLASSES}
    for name in sorted((used - generated - {"None", "self"}) | {"Any"}):
        home = next((m for m in SOURCES if name in _defined_names(trees[m])), None)
        if home is None and hasattr(typing, name):
            home = "typing"
        if home is None:
            continue  # a builtin (str, int, bool, float, list, dict, ...)
        by_module.setdefault(home, set()).add(name)
    by_module.setdefault("_runner", set()).update({"Blocking", "SyncBridge", "blocking_of", "run_with_callbacks"})
    out = []
    for module in ["typing"] + SOURCES:
        names = sorted(by_module.get(module, ()))
        if not names:
            continue
        source = module if module == "typing" else "." + module
        out.append(f"from {source} import (")
        out += [f"    {n}," for n in names]
        out.append(")")
    return out


def generate() -> str:
    trees = {m: ast.parse((PACKAGE / f"{m}.py").read_text()) for m in SOURCES}
    used: Set[str] = set()
    body: List[str] = []
    for twin in CLASSES:
        body += _class(trees[twin.module], twin, used)
    sources = ", ".join(sorted({f"{t.module}.py" for t in CLASSES}))
    lines = HEADER.format(sources=sources).splitlines() + _imports(used, trees) + body
    return "\n".join(lines) + "\n" + FOOTER


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if sync.py is not what this generates")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET} is stale: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
