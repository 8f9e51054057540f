"""No symbol of another library is defined in our code: neither
the daemon nor libkernelbridge.so may define a function or variable that
libmicrohttpd, libzmq, czmq, jansson, SQLite, wslay, OpenSSL or the C
library define, which the dynamic linker would bind ahead of theirs, for
their own calls too. Read from `nm -D --defined-only` of the built files
(KB_BINARY, else build/kernelbridge, and libkernelbridge.so beside it)
against the same listing of every library they load."""

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("KB_BINARY") or REPO / "build" / "kernelbridge")
LIBRARY = BINARY.parent / "libkernelbridge.so"
# The prefixes of the libraries we link, named even when a library's own
# listing cannot be read: libmicrohttpd, libzmq, czmq's classes, jansson,
# SQLite, wslay, OpenSSL.
FOREIGN = re.compile(r"^(MHD_|zmq_|z[a-z]+_|json_|jansson_|sqlite3_|wslay_|EVP_|CRYPTO_|"
                     r"OPENSSL_|HMAC|SHA[0-9]|RAND_)")


def built(path):
    if not path.exists():
        pytest.skip(f"{path} is not built (cmake --build build)")
    return path


def defined(path):
    """{name: type letter} of the dynamic symbols path defines. A data
    symbol with a library's version (name@VERSION) is a copy relocation:
    storage for the library's own variable (stdout, optarg), not ours."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], check=True,
                         capture_output=True, text=True).stdout
    names = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, name = parts[1], parts[2]
        if "@" in name and "@@" not in name and kind in "BDVRbdvr":
            continue
        names[name.split("@")[0]] = kind
    return names


def loaded_libraries(path):
    """The shared libraries path loads, as resolved on this machine."""
    out = subprocess.run(["ldd", str(path)], check=True, capture_output=True, text=True).stdout
    found = re.findall(r"=>\s+(/\S+)", out)
    return [Path(p) for p in found if "libkernelbridge" not in p]


@pytest.mark.parametrize("path", [BINARY, LIBRARY], ids=["daemon", "libkernelbridge.so"])
def test_no_symbol_of_another_library_is_defined(path):
    ours = defined(built(path))
    if path == LIBRARY:
        assert ours, f"{path} defines no dynamic symbol: nm read nothing"
    by_prefix = sorted(n for n in ours if FOREIGN.match(n))
    assert not by_prefix, f"{path.name} defines other libraries' symbols: {by_prefix}"
    libraries = loaded_libraries(path)
    assert any("libmicrohttpd" in p.name for p in libraries), libraries
    clashes = {}
    for library in libraries:
        theirs = defined(library)
        same = sorted(n for n in ours if n in theirs)
        if same:
            clashes[library.name] = same
    assert not clashes, f"{path.name} defines symbols its libraries define: {clashes}"
