#!/usr/bin/env bash
# Installs everything kernelbridge needs to build, run and be tested on
# Debian 12, from Debian's archive only. Idempotent; run as root.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
  # libraries (see README: dependencies)
  libzmq3-dev libczmq-dev libjansson-dev libssl-dev libmicrohttpd-dev
  # kernels the tests drive, and their rich-output libraries
  python3-ipykernel python3-jupyter-client python3-zmq python3-matplotlib xpython
  r-cran-irkernel octave python3-octave-kernel
  # test runners and peers measured by bench/
  python3-pytest python3-setuptools python3-pip jupyter-server python3-jupyter-server
  python3-websocket
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi

# E2B's JavaScript SDK, which tests/e2b-js drives kernelbridge with: Node 20
# from the machine, the pinned packages of its package-lock.json from npm,
# into tests/e2b-js/node_modules (not in git).
if command -v npm >/dev/null 2>&1; then
  npm ci --prefix "$(cd "$(dirname "$0")/.." && pwd)/tests/e2b-js" --no-audit --no-fund
else
  echo "setup.sh: npm not found: install Node 20 to run tests/e2b-js" >&2
fi
