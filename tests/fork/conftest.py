"""Fixtures of the fork tests (their helpers are in forklib.py)."""

import pytest

from .forklib import Forks, our_children, reap, start_parent, subreaper


@pytest.fixture(scope="module")
def forks_are_our_children():
    """While these tests run the test process is a child subreaper (as the
    daemon is), so forks become its children. Afterwards, a fork a failed
    test could not note is killed, and the test process is an ordinary
    parent again for whatever runs next. Each module here asks for it
    (pytestmark): an autouse fixture of this conftest reached other suites
    run in the same pytest process."""
    before = our_children()
    subreaper(True)
    yield
    subreaper(False)
    for pid in our_children() - before:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                ours = b"ipykernel" in f.read()
        except OSError:
            ours = True
        if ours:
            reap(pid)


@pytest.fixture
def forks():
    made = Forks()
    yield made
    made.close()


@pytest.fixture
def parent():
    km, kc = start_parent()
    yield km, kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)
