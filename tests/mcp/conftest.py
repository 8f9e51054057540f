"""Fixtures of the /mcp raw-HTTP tests: a daemon per module (no kernel
pool: bad input needs no kernel until a test starts one)."""

import pytest

from .mcplib import Daemon


@pytest.fixture(scope="module")
def mcp_daemon():
    d = Daemon("--pool", "python=0", "--max-body", "64K", "--mcp-allow-origin",
               "https://app.example")
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def session(mcp_daemon):
    sid, _ = mcp_daemon.initialize()
    try:
        yield sid
    finally:
        mcp_daemon.request("DELETE", headers={"Mcp-Session-Id": sid})
