"""Tests of the kernelbridge Python SDK (a package, so that its conftest and
helpers never clash with other test suites of the repository run in the
same pytest session)."""
