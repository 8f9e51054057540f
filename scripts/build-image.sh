#!/usr/bin/env bash
# Builds the container image kernelbridge:<version> from deploy/Containerfile
# with podman (runc as the OCI runtime), then prints its size and package
# list. Idempotent: a second run reuses the base image and podman's layer
# cache, and only rebuilds what changed. Run as root from anywhere.
#
# The base (the Containerfile's DEBIAN_IMAGE, both stages) is, in order:
#   - KB_BASE_IMAGE when set;
#   - debian:bookworm-slim when podman already has it, or a registry serves
#     it (KB_PULL=0 skips asking);
#   - else localhost/kernelbridge-base:bookworm, made once from Debian's
#     archive (debootstrap --variant=minbase bookworm, slimmed as
#     bookworm-slim is, with bookworm-updates and bookworm-security in its
#     sources) and imported with `podman import`; KB_DEBIAN_MIRROR picks
#     the mirror (default: http://deb.debian.org/debian).
#
# KB_IMAGE names the image (default kernelbridge:<version>, the version of
# sdk/python/src/kernelbridge/_version.py). KB_OCI_RUNTIME picks the OCI
# runtime (default runc: Debian's crun refuses a hybrid cgroup hierarchy).
# The build's containers get this machine's hard limits as their ulimits
# (podman's defaults may exceed them, and the runtime then fails); the
# tests run the image with the same (tests/deploy/test_image.py).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' sdk/python/src/kernelbridge/_version.py)
image=${KB_IMAGE:-kernelbridge:$version}
runtime=${KB_OCI_RUNTIME:-runc}
mirror=${KB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
slim=docker.io/library/debian:bookworm-slim
local_base=localhost/kernelbridge-base:bookworm
say() { printf 'build-image: %s\n' "$*" >&2; }

for tool in podman "$runtime"; do
  command -v "$tool" >/dev/null || { say "$tool is missing: run scripts/setup.sh"; exit 1; }
done

# The machine's hard limits, for every container of the build; podman
# itself (and so conmon and runc) runs with at most 32768 processes, which
# a container's limit cannot exceed either (runc: "error setting rlimit").
limit() { local v; v=$(ulimit -H "$1"); [ "$v" = unlimited ] || [ "$v" -gt "$2" ] && v=$2; echo "$v"; }
nofile=$(limit -n 1048576)
nproc=$(limit -u 32768)
ulimits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")

# The base of the image, made from Debian's archive: minbase, then what
# bookworm-slim leaves out (documentation, man pages, locales but C's) kept
# out of every later package too.
make_base() {
  command -v debootstrap >/dev/null || { say "debootstrap is missing: run scripts/setup.sh"; exit 1; }
  local dir
  dir=$(mktemp -d /var/tmp/kb-base.XXXXXX)
  trap 'rm -rf "$dir"' RETURN
  say "making $local_base with debootstrap from $mirror"
  debootstrap --variant=minbase bookworm "$dir" "$mirror" >&2
  cat >"$dir/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$dir"/usr/share/{man,groff,info,lintian}/* "$dir"/var/lib/apt/lists/* \
    "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb "$dir"/var/log/*.log
  find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  rm -f "$dir/etc/apt/sources.list"
  cat >"$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  : >"$dir/etc/machine-id"
  tar --numeric-owner -C "$dir" -c . | podman import --change 'CMD ["bash"]' - "$local_base" >/dev/null
}

if [ -n "${KB_BASE_IMAGE:-}" ]; then
  base=$KB_BASE_IMAGE
elif podman image exists "$slim"; then
  base=$slim
elif [ "${KB_PULL:-1}" != 0 ] && ! podman image exists "$local_base" \
  && timeout 120 podman pull -q "$slim" >/dev/null 2>&1; then
  base=$slim
else
  podman image exists "$local_base" || make_base
  base=$local_base
fi
say "base: $base"

# The context is the repository, filtered by .containerignore to what the
# Containerfile copies: no build tree, node_modules, caches or local files.
start=$(date +%s)
podman build --runtime "$runtime" --network host --pull=never "${ulimits[@]}" \
  --build-arg "DEBIAN_IMAGE=$base" -f deploy/Containerfile -t "$image" . >&2
say "built $image in $(($(date +%s) - start)) s"

# Nothing the runtime does not need: no compiler, no headers, no build tree.
run=(podman run --rm --runtime "$runtime" --network none "${ulimits[@]}" --entrypoint /bin/sh "$image" -c)
leftovers=$("${run[@]}" 'for p in /usr/bin/cc /usr/bin/gcc /usr/bin/cmake /usr/bin/make \
  /usr/include/zmq.h /usr/include/stdio.h /src /stage; do [ -e "$p" ] && echo "$p"; done; true')
if [ -n "$leftovers" ]; then
  say "the image holds what the runtime does not need: $leftovers"
  exit 1
fi

size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image: $image ($(podman image inspect --format '{{.Id}}' "$image" | cut -c1-12))"
echo "size: $((size / 1024 / 1024)) MiB ($size bytes)"
echo "packages:"
"${run[@]}" "dpkg-query -W -f '\${binary:Package} \${Version}\n'" | sed 's/^/  /'
