"""The docs site holds together: `mkdocs build --strict` passes, every page
under docs/ is in mkdocs.yml's nav (mkdocs 1.4 only notes orphans), every
relative link and anchor resolves, the screenshots the browser tests write
are the ones the pages show, and the reference pages name what the code has
(every error code, every exported C function; the C example compiles and
runs)."""

import re
import subprocess
from pathlib import Path

import yaml
from markdown.extensions.toc import slugify

from .docs_testlib import BINARY, DOCS, FENCE, ROOT, links, pages

MKDOCS_YML = ROOT / "mkdocs.yml"


def nav_pages():
    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)
    return list(walk(yaml.safe_load(MKDOCS_YML.read_text())["nav"]))


def anchors(page):
    """The heading ids mkdocs gives a page (toc's slugify)."""
    text = FENCE.sub("", page.read_text())
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_mkdocs_build_strict(tmp_path):
    done = subprocess.run(["mkdocs", "build", "--strict", "--config-file", str(MKDOCS_YML),
                           "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()


def test_every_page_is_in_the_nav_once():
    nav = nav_pages()
    assert len(nav) == len(set(nav)), nav
    assert sorted(nav) == pages(), (
        "not in the nav: %s; in the nav, no such page: %s"
        % (sorted(set(pages()) - set(nav)), sorted(set(nav) - set(pages()))))
    for required in ("getting-started.md", "reference/http-api.md", "reference/configuration.md",
                     "reference/errors.md", "reference/c-api.md", "ARCHITECTURE.md",
                     "PERFORMANCE.md"):
        assert required in nav, required


def test_every_relative_link_resolves():
    checked = 0
    for name in pages():
        page = DOCS / name
        for target in links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.is_file(), "%s: %s" % (name, target)
            assert DOCS in dest.parents, "%s links outside docs/: %s" % (name, target)
            if anchor and dest.suffix == ".md":
                assert anchor in anchors(dest), "%s: no heading for %s" % (name, target)
            checked += 1
    assert checked >= 60, checked


def screenshots_the_tests_write():
    names = set()
    for test in ("test_console.py", "test_jupyter_clients.py"):
        text = (ROOT / "tests" / "integration" / test).read_text()
        names |= set(re.findall(r'"((?:console|notebook)-[a-z-]+\.png)"', text))
    return names


def test_screenshots_are_the_ones_the_docs_show():
    written = screenshots_the_tests_write()
    assert {"console-run.png", "console-fork.png", "notebook-gateway.png"} <= written, written
    shown = set()
    for name in pages():
        for target in links(DOCS / name):
            if target.endswith(".png"):
                shown.add(((DOCS / name).parent / target).resolve())
    images = {p.resolve() for p in (DOCS / "images").glob("*.png")}
    assert {(DOCS / "images" / n).resolve() for n in written} <= images, written
    assert images == shown, "in docs/images, shown nowhere: %s; shown, missing: %s" % (
        sorted(p.name for p in images - shown), sorted(p.name for p in shown - images))
    assert {p.name for p in images} == written, "screenshots no browser test writes: %s" % (
        sorted({p.name for p in images} - written))


def test_errors_page_has_every_code_with_its_status_and_sdk_class():
    header = (ROOT / "include" / "kernelbridge" / "kb_error.h").read_text()
    codes = {name: int(status)
             for name, status in re.findall(r"KB_ERR_(\w+),\s*/\* (\d{3})", header)}
    codes["INTERNAL_ERROR"] = codes.pop("INTERNAL")
    assert len(codes) >= 21, codes
    sdk = (ROOT / "sdk" / "python" / "src" / "kernelbridge" / "errors.py").read_text()
    classes = dict(re.findall(r'"([A-Z_]+)": (\w+Error),', sdk))
    rows = {}
    for line in (DOCS / "reference" / "errors.md").read_text().splitlines():
        m = re.match(r"\| `([A-Z_]+)` \| (\d{3}) \| [^|]+ \| `(\w+)` \|$", line)
        if m:
            rows[m[1]] = (int(m[2]), m[3])
    assert sorted(rows) == sorted(codes), (sorted(set(codes) - set(rows)),
                                           sorted(set(rows) - set(codes)))
    for code, status in codes.items():
        assert rows[code] == (status, classes[code]), (code, rows[code], status, classes[code])


def exported_functions():
    names = []
    for header in sorted((ROOT / "include" / "kernelbridge").glob("*.h")):
        text = header.read_text()
        names += re.findall(r"KB_EXPORT[^;{]*?\b(kb_\w+)\s*\(", text)
    return names


def test_c_api_page_names_every_exported_function():
    page = (DOCS / "reference" / "c-api.md").read_text()
    names = exported_functions()
    assert len(names) >= 50, names
    missing = [n for n in names if "`%s`" % n not in page]
    assert not missing, missing


def test_c_api_example_compiles_and_runs(tmp_path):
    (example,) = [body for kind, body in FENCE.findall((DOCS / "reference" / "c-api.md").read_text())
                  if kind == "c"]
    source = tmp_path / "example.c"
    source.write_text(example)
    libdir = Path(BINARY).resolve().parent
    jansson = subprocess.run(["pkg-config", "--cflags", "--libs", "jansson"], capture_output=True,
                             text=True, check=True).stdout.split()
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include"), str(source),
                    "-L", str(libdir), "-lkernelbridge", *jansson, "-o", str(tmp_path / "example")],
                   check=True, timeout=120)
    done = subprocess.run([str(tmp_path / "example")], capture_output=True, text=True,
                          cwd=tmp_path, env={"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin",
                                             "HOME": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"text": "42"' in done.stdout and '"execution_count": 2' in done.stdout, done.stdout
