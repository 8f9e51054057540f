"""The package itself: its version matches the daemon's, and it installs offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import kernelbridge

from .kbsdk_testlib import SDK_DIR, SYSTEM_PYTHON


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
