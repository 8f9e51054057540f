#!/bin/sh
# The installed library from outside: install the build into a scratch
# DESTDIR, build api_program.c with nothing but what `pkg-config
# kernelbridge` gives, and run it against that copy of libkernelbridge.so.
# Usage: check_install.sh BUILD_DIR CC PREFIX LIBDIR VERSION [EXTRA_FLAGS]
# (PREFIX, LIBDIR: the install's prefix and full library dir; EXTRA_FLAGS:
# the sanitizers the library was built with, if any).
set -eu
build=$1 cc=$2 prefix=$3 libdir=$4 version=$5 extra=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
dest=$(mktemp -d "$build/api-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT

DESTDIR=$dest cmake --install "$build" >"$dest.log" 2>&1 || { cat "$dest.log"; rm -f "$dest.log"; exit 1; }
rm -f "$dest.log"

# The copy under DESTDIR is the install moved with its prefix.
pc="$dest$libdir/pkgconfig/kernelbridge.pc"
sed -i "s|^prefix=.*|prefix=$dest$prefix|" "$pc"
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
got=$(pkg-config --modversion kernelbridge)
[ "$got" = "$version" ] || { echo "kernelbridge.pc says version $got, not $version"; exit 1; }
flags=$(pkg-config --cflags --libs kernelbridge)
echo "pkg-config kernelbridge: $flags"
# shellcheck disable=SC2086 # flags are words
"$cc" -std=c11 -Wall -Wextra -Werror $extra "$here/api_program.c" $flags -o "$dest/api_program"
LD_LIBRARY_PATH="$dest$libdir" "$dest/api_program" "$version"
