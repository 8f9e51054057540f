"""Fixtures of the /mcp raw-HTTP tests: a daemon per module (no kernel
pool: bad input needs no kernel until a test starts one)."""

import pytest

from .mcplib import Daemon


@pytest.fixture(scope="module")
def daemon():
    d = Daemon("--pool", "python=0", "--max-body", "64K", "--mcp-allow-origin",
               "https://app.example")
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def session(daemon):
    sid, _ = daemon.initialize()
    try:
        yield sid
    finally:
        daemon.request("DELETE", headers={"Mcp-Session-Id": sid})
