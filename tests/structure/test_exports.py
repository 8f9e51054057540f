"""libkernelbridge.so exports its public API and nothing else: the functions
its dynamic symbol table defines (`nm -D --defined-only`) are exactly the
functions declared in include/kernelbridge.h and include/kernelbridge/*.h,
each declared KB_EXPORT. The build is $KB_BUILD_DIR, else the directory of
$KB_BINARY, else <repo>/build."""

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADERS = sorted([REPO / "include" / "kernelbridge.h",
                  *(REPO / "include" / "kernelbridge").glob("*.h")])
FUNCTION_TYPES = {"T", "W", "i"}  # text, weak, indirect


def build_dir():
    if os.environ.get("KB_BUILD_DIR"):
        return Path(os.environ["KB_BUILD_DIR"])
    if os.environ.get("KB_BINARY"):
        return Path(os.environ["KB_BINARY"]).resolve().parent
    return REPO / "build"


def declarations(text):
    """{function name: its declaration} of a C header's top level."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", " ", text, flags=re.S)
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
    while re.search(r"\{[^{}]*\}", text):  # bodies of structs and enums
        text = re.sub(r"\{[^{}]*\}", " ", text)
    found = {}
    for statement in text.split(";"):
        statement = " ".join(statement.split())
        if statement.startswith("typedef"):
            continue
        name = re.match(r"[^(]*?(\w+)\s*\(", statement)
        if name:
            found[name.group(1)] = statement
    return found


def declared():
    found = {}
    for header in HEADERS:
        found.update(declarations(header.read_text()))
    return found


def exported():
    """{name: nm's type letter} of the library's defined dynamic symbols."""
    library = build_dir() / "libkernelbridge.so"
    assert library.exists(), "%s is missing: build first" % library
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], check=True,
                         capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3:
            symbols[fields[2].split("@")[0]] = fields[1]
    return symbols


def test_headers_are_read():
    names = declared()
    assert {"kb_service_new", "kb_error_set", "kb_result_to_json"} <= set(names), names
    assert len(names) > 40, names


def test_every_public_declaration_is_marked_for_export():
    unmarked = [name for name, text in declared().items() if not text.startswith("KB_EXPORT ")]
    assert not unmarked, unmarked


def test_the_library_exports_exactly_the_declared_functions():
    symbols = exported()
    functions = {name for name, kind in symbols.items() if kind in FUNCTION_TYPES}
    others = sorted(name for name, kind in symbols.items() if kind not in FUNCTION_TYPES)
    names = set(declared())
    assert not others, "data exported: %s" % others
    assert not functions - names, "exported, not declared: %s" % sorted(functions - names)
    assert not names - functions, "declared, not exported: %s" % sorted(names - functions)
