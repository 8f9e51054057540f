"""tests/deploy's Python tests: the container image built and run with
podman (a package, so that its helpers never clash with other suites run
in the same pytest session)."""
