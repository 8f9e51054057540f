#!/bin/sh
# check.sh - api/openapi.yaml in CI: Redocly's lint (zero errors), types
# generated from it by openapi-typescript, the typed client checked by
# `tsc --noEmit --strict`, then compiled to a temp dir and run with node
# against the real daemon ($KB_BINARY, else build/kernelbridge).
# Needs this folder's pinned packages (npm ci; scripts/setup.sh does it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
bin=node_modules/.bin
out=$(mktemp -d "${TMPDIR:-/tmp}/kbts-out.XXXXXX")
trap 'rm -rf "$out"' EXIT INT TERM
"$bin/redocly" lint --config redocly.yaml ../../api/openapi.yaml
mkdir -p generated
"$bin/openapi-typescript" ../../api/openapi.yaml --default-non-nullable false -o generated/api.d.ts
"$bin/tsc" -p tsconfig.json --noEmit
"$bin/tsc" -p tsconfig.json --outDir "$out"
printf '{"type": "module"}\n' > "$out/package.json"
node run.mjs "$out"
