#!/usr/bin/env bash
# install_test.sh BUILD_DIR SRC_DIR - installs weft into a temporary prefix
# and builds a consumer with pkg-config and with find_package(weft).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
lib=$(ls -d "$tmp"/prefix/lib*/ | head -1)
test -f "$tmp/prefix/include/weft.h"
test -x "$tmp/prefix/bin/weftrun" && test -x "$tmp/prefix/bin/weft-bench" && test -x "$tmp/prefix/bin/weft-info"
# pkg-config
export PKG_CONFIG_PATH="$lib/pkgconfig"
cc -std=c11 $(pkg-config --cflags weft) "$src/tests/install/consumer.c" -o "$tmp/c1" $(pkg-config --libs weft)
LD_LIBRARY_PATH="$lib" "$tmp/c1"
# only weft_* symbols exported
bad=$(nm -D --defined-only "$lib"/libweft.so | awk '{print $3}' | grep -v '^weft_' || true)
if [ -n "$bad" ]; then echo "non-weft symbols exported: $bad"; exit 1; fi
readelf -d "$lib"/libweft.so | grep -q 'SONAME.*libweft.so.0' || { echo "SONAME is not libweft.so.0"; exit 1; }
# find_package
mkdir -p "$tmp/cons"
cp "$src/tests/install/consumer.c" "$tmp/cons/"
cp "$src/tests/install/CMakeLists.txt.in" "$tmp/cons/CMakeLists.txt"
cmake -S "$tmp/cons" -B "$tmp/cons/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cons/b" >/dev/null
LD_LIBRARY_PATH="$lib" "$tmp/cons/b/consumer"
echo "install test passed"
