#!/usr/bin/env bash
# Installs Hamlyn's C library under PREFIX: lib/libhamlyn.so.MAJOR (and the libhamlyn.so
# link), lib/libhamlyn.a, include/hamlyn.h and lib/pkgconfig/hamlyn.pc.
#
#   crates/hamlyn-capi/install.sh PREFIX             builds the release library first
#   crates/hamlyn-capi/install.sh --lib-dir DIR PREFIX
#                                                    installs the one already built in DIR
#                                                    (target/debug, say: what the tests do)
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs hamlyn)
# (and LD_LIBRARY_PATH=PREFIX/lib to run it, unless PREFIX/lib is a system directory).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

lib_dir=
if [[ ${1:-} == --lib-dir ]]; then
    lib_dir=${2:?--lib-dir needs a directory}
    shift 2
fi
prefix=${1:?usage: install.sh [--lib-dir DIR] PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

if [[ -z $lib_dir ]]; then
    cargo build --manifest-path "$root/Cargo.toml" --release -p hamlyn-capi
    lib_dir=${CARGO_TARGET_DIR:-$root/target}/release
fi
for f in libhamlyn_capi.so libhamlyn_capi.a; do
    [[ -f $lib_dir/$f ]] || { echo "install.sh: no $f in $lib_dir" >&2; exit 1; }
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
major=${version%%.*}

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$lib_dir/libhamlyn_capi.so" "$prefix/lib/libhamlyn.so.$version"
ln -sf "libhamlyn.so.$version" "$prefix/lib/libhamlyn.so.$major"
ln -sf "libhamlyn.so.$major" "$prefix/lib/libhamlyn.so"
install -m 0644 "$lib_dir/libhamlyn_capi.a" "$prefix/lib/libhamlyn.a"
install -m 0644 "$here/include/hamlyn.h" "$prefix/include/hamlyn.h"
# What a static link needs besides libhamlyn.a (rustc --print native-static-libs on
# Linux with glibc).
private="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE@|$private|" \
    "$here/hamlyn.pc.in" >"$prefix/lib/pkgconfig/hamlyn.pc"
echo "installed libhamlyn $version in $prefix"
