#!/usr/bin/env bash
# E2B's own JavaScript SDK test suite (js/tests/*.test.ts of
# e2b-dev/code-interpreter, vitest) against kernelbridge's --e2b-listen.
# The suite runs in E2B's debug mode (E2B_DEBUG=true: Sandbox.create() makes no
# cloud call, the tests that need E2B's cloud are skipIf(isDebug)) with
# E2B_SANDBOX_URL pointing the SDK at our listener on an ephemeral loopback port.
# See bench/e2b_suite/README.md.
#
# usage: bench/e2b_suite/run.sh [--src DIR] [--binary PATH] [--bare] [--keep]
#   --src DIR     E2B's repository: a bare git dir (exported with git archive
#                 HEAD) or a checkout (copied); default the mirror below
#   --binary PATH kernelbridge binary (default $KB_BINARY, else build/kernelbridge)
#   --bare        python3 kernel as installed, without E2B's template Python
#                 environment (startup scripts, e2b_charts, pandas, pydantic)
#   --keep        keep the temporary directory (printed) for inspection
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=/work/.mirror/e2b-dev+code-interpreter/repo
binary=${KB_BINARY:-$root/build/kernelbridge}
bare=0 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --src) src=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --bare) bare=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "no kernelbridge binary at $binary" >&2; exit 2; }

tmp=$(mktemp -d /tmp/kb-e2b-suite.XXXXXX)
daemon_pid=
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
  if [ "$keep" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. E2B's js/ (and, for the kernel environment, template/ and chart_data_extractor/)
parts="js template chart_data_extractor"
if [ "$(git -C "$src" rev-parse --is-bare-repository 2>/dev/null)" = true ]; then
  git -C "$src" archive HEAD $parts | tar -x -C "$tmp"
  rev=$(git -C "$src" rev-parse HEAD)
elif [ -d "$src/js/tests" ]; then
  for p in $parts; do cp -r "$src/$p" "$tmp/"; done
  rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout)")
else
  echo "$src is neither a bare git dir nor a checkout with js/tests" >&2; exit 2
fi
echo "E2B code-interpreter at $rev"

# 2. npm: the SDK's dependency (e2b) and its test tools (vitest, dotenv) at the
# ranges its package.json gives; its build and lint tools are left out.
cd "$tmp/js"
node -e '
const fs = require("fs"); const p = JSON.parse(fs.readFileSync("package.json"));
const dev = {}; for (const k of ["vitest", "dotenv"]) if (p.devDependencies[k]) dev[k] = p.devDependencies[k];
p.devDependencies = dev; delete p.packageManager; p.scripts = {};
fs.writeFileSync("package.json", JSON.stringify(p, null, 2));'
npm install --no-audit --no-fund --loglevel=error >/dev/null
node -e 'for (const n of ["e2b", "vitest"]) console.log(n, require(`./node_modules/${n}/package.json`).version)'

# 3. E2B's template Python environment for the python3 kernel: its IPython
# startup scripts (0002_data.py: e2b/data and e2b/chart formatters;
# 0003_images.py: PIL show/save as display) and ipython_kernel_config.py;
# e2b_charts from the same checkout; pandas from Debian (apt-get download,
# unpacked here, not installed); pydantic 2 and orjson (not in Debian
# bookworm, no PyPI here) copied from a local Python 3.11 that has them.
jupyter_path=
if [ "$bare" = 0 ]; then
  env_dir=$tmp/kernel-env; pyx=$env_dir/site
  mkdir -p "$pyx" "$env_dir/ipython/profile_default/startup" "$env_dir/jupyter/kernels/python3" "$env_dir/debs"
  cp "$tmp"/template/startup_scripts/*.py "$env_dir/ipython/profile_default/startup/"
  cp "$tmp/template/ipython_kernel_config.py" "$env_dir/ipython/profile_default/"
  cp -r "$tmp/chart_data_extractor/e2b_charts" "$pyx/"
  (cd "$env_dir/debs" && apt-get download -q python3-pandas python3-pandas-lib >/dev/null 2>&1) \
    || { echo "apt-get download python3-pandas failed (run apt-get update?)" >&2; exit 1; }
  for d in "$env_dir"/debs/*.deb; do dpkg-deb -x "$d" "$env_dir/debroot"; done
  cp -r "$env_dir/debroot/usr/lib/python3/dist-packages/pandas" "$pyx/"
  site=
  for py in ${E2B_SUITE_PY311:-} "$HOME"/.pyenv/versions/3.11*/bin/python3 "$(command -v python3.11 || true)"; do
    [ -x "$py" ] || continue
    site=$("$py" -c 'import sys, os, pydantic, orjson
assert sys.version_info[:2] == (3, 11) and pydantic.VERSION >= "2"
print(os.path.dirname(os.path.dirname(pydantic.__file__)))' 2>/dev/null) && break || site=
  done
  if [ -n "$site" ]; then
    for m in pydantic pydantic_core annotated_types typing_inspection typing_extensions.py orjson; do
      if [ -e "$site/$m" ]; then cp -r "$site/$m" "$pyx/"; fi
    done
    echo "kernel environment: pydantic and orjson from $site"
  else
    echo "kernel environment: no Python 3.11 with pydantic 2 and orjson found (set E2B_SUITE_PY311): charts will fail" >&2
  fi
  py3=$(/usr/bin/python3 -c 'import json; print(json.load(open("/usr/share/jupyter/kernels/python3/kernel.json"))["argv"][0])' 2>/dev/null || echo /usr/bin/python3)
  cat > "$env_dir/jupyter/kernels/python3/kernel.json" <<EOF
{"argv": ["$py3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
 "display_name": "Python 3 (E2B template environment)", "language": "python",
 "env": {"PYTHONPATH": "$pyx", "IPYTHONDIR": "$env_dir/ipython"}}
EOF
  jupyter_path=$env_dir/jupyter
  "$py3" -c 'import matplotlib; print("matplotlib", matplotlib.__version__, "(E2B pins 3.10)")'
fi

# 4. The daemon: E2B listener on an ephemeral loopback port, fresh state.
# Kernels are the installed kernelspecs: python3 (above, when not --bare),
# deno for js/ts, ir for r, bash; there is no Java kernel.
echo "kernelspecs: $(JUPYTER_PATH=$jupyter_path "$binary" kernelspecs 2>/dev/null | awk 'NR>1 {print $1}' | paste -sd' ')"
cd "$tmp"
JUPYTER_PATH=$jupyter_path "$binary" serve --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --e2b-listen 127.0.0.1:0 --e2b-port-file "$tmp/e2b-port" --ephemeral \
  >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 1 300); do
  [ -s "$tmp/e2b-port" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$tmp/daemon.log" >&2; exit 1; }
  sleep 0.1
done
port=$(cat "$tmp/e2b-port")
echo "daemon pid $daemon_pid, E2B listener on http://127.0.0.1:$port"

# 5. The suite: E2B's vitest.config.mts (tests/**/*.test.ts minus
# tests/runtimes/, which bun and deno run), one file at a time since every
# test shares the one server (E2B gives each test a sandbox of its own).
cd "$tmp/js"
set +e
E2B_DEBUG=true E2B_SANDBOX_URL=http://127.0.0.1:$port timeout 900 \
  npx vitest run --no-file-parallelism --reporter=default --reporter=json \
  --outputFile.json="$tmp/vitest.json" >"$tmp/vitest.out" 2>&1
rc=$?
set -e
[ -s "$tmp/vitest.json" ] || { tail -50 "$tmp/vitest.out"; echo "vitest wrote no results (exit $rc)" >&2; exit 1; }

# 6. Summary
node - "$tmp/vitest.json" <<'EOF'
const r = JSON.parse(require('fs').readFileSync(process.argv[2], 'utf8'))
const all = r.testResults.flatMap((f) => f.assertionResults.map((t) => ({ ...t,
  file: f.name.replace(/.*\/js\//, '') })))
const by = (s) => all.filter((t) => t.status === s)
const passed = by('passed'), failed = by('failed')
const skipped = all.filter((t) => t.status !== 'passed' && t.status !== 'failed')
const ran = passed.length + failed.length
console.log(`\nE2B's JS SDK suite against --e2b-listen: ${passed.length}/${ran} passed ` +
  `(${all.length} tests in ${r.testResults.length} files; ${skipped.length} skipped by the suite in debug mode)`)
for (const t of failed) {
  const msg = (t.failureMessages[0] || '').split('\n')[0].slice(0, 160)
  console.log(`  FAIL ${t.file} > ${t.fullName.trim()}: ${msg}`)
}
console.log(`${passed.length} passed, ${failed.length} failed, ${skipped.length} skipped`)
EOF
echo "vitest exit status $rc; full output: $tmp/vitest.out$([ "$keep" = 1 ] || echo ' (removed; --keep keeps it)')"
