"""The package itself: its version matches the daemon's, and it installs offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import kernelbridge

from .kbsdk_testlib import SDK_DIR, SYSTEM_PYTHON, daemon_binary


def test_version_matches_cmake_and_daemon(cmake_version, kb):
    assert kernelbridge.__version__ == cmake_version
    assert kb.health()["version"] == cmake_version
    # the distribution takes its version from the package (no second copy)
    pyproject = tomllib.loads((SDK_DIR / "pyproject.toml").read_text())
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kernelbridge._version.__version__"}


def test_installs_offline_with_system_setuptools(tmp_path):
    # Build from a copy: setuptools writes build/ and *.egg-info beside the sources.
    source = tmp_path / "sdk"
    shutil.copytree(SDK_DIR, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache", "tests"))
    target = tmp_path / "site"
    build_env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
         "--target", str(target), str(source)],
        capture_output=True, text=True, env=build_env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = subprocess.run(
        [SYSTEM_PYTHON, "-c",
         "import kernelbridge, importlib.metadata as m; "
         "print(kernelbridge.__file__); print(m.version('kernelbridge')); "
         "import pathlib; print((pathlib.Path(kernelbridge.__file__).parent / 'py.typed').exists())"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)}, timeout=60)
    assert check.returncode == 0, check.stderr
    path, version, typed = check.stdout.split()
    assert Path(path).is_relative_to(target)
    assert version == kernelbridge.__version__ and typed == "True"


def test_standard_library_only():
    """The SDK imports nothing outside the standard library."""
    src = SDK_DIR / "src" / "kernelbridge"
    allowed = set(sys.stdlib_module_names) | {"kernelbridge"}
    for path in src.glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from") and not line.startswith(" "):
                top = words[1].split(".")[0]
                assert top in allowed or top == "", f"{path.name}: {line}"


USER_CODE = '''\
import kernelbridge

with kernelbridge.connect("http://127.0.0.1:1") as kb:
    ctx: kernelbridge.InterpreterContext = kb.create_context(language="python", memory_limit=1 << 30)
    generation: int | None = ctx.generation
    result: kernelbridge.InterpreterResult = ctx.run("1", on_stdout=print)
    truncated: bool = result.truncated
    frames = [f.data for f in kb.process(result.process.process_id).logs(follow=True)]
    wrong: int = kb.run("1").text
'''


def test_installs_offline_into_a_venv_typed(tmp_path):
    """pip install --no-index --no-build-isolation into a venv that sees
    Debian's setuptools: the version is the daemon's, py.typed ships, and a
    type checker sees the blocking API's types from the installed package."""
    source = tmp_path / "sdk"  # setuptools writes build/ and *.egg-info beside the sources
    shutil.copytree(SDK_DIR, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache", "tests"))
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    made = subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", str(source)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    python = str(venv / "bin" / "python")
    check = subprocess.run(
        [python, "-c", "import kernelbridge, pathlib, importlib.metadata as m; print(kernelbridge.__version__); "
         "print(m.version('kernelbridge')); print(kernelbridge.__file__); "
         "print((pathlib.Path(kernelbridge.__file__).parent / 'py.typed').is_file())"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert check.returncode == 0, check.stderr
    version, dist_version, path, typed = check.stdout.split()
    assert Path(path).is_relative_to(venv), path
    daemon = subprocess.run([str(daemon_binary()), "--version"], capture_output=True, text=True, timeout=30)
    assert daemon.stdout.split() == ["kernelbridge", version] == ["kernelbridge", dist_version]
    assert typed == "True"

    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    mypy = subprocess.run([python, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(user)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    # Only the deliberate mistake is reported: everything else type-checks
    # against the installed package.
    errors = [line for line in mypy.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "user.py:9:" in errors[0], mypy.stdout + mypy.stderr
    assert "incompatible types in assignment" in errors[0].lower(), errors[0]
    assert '"Optional[str]"' in errors[0] or '"str | None"' in errors[0], errors[0]

    # The source tree stays clean.
    leftovers = [p for p in SDK_DIR.iterdir() if p.name == "build" or p.name.endswith(".egg-info")]
    assert not leftovers, leftovers
