#!/usr/bin/env bash
# find_package_consumer.sh BUILD_DIR WORK_DIR: installs lockstep from BUILD_DIR into a prefix
# and builds and runs a separate project that uses find_package(lockstep).
set -euo pipefail
build="$1"; work="$2"; here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
