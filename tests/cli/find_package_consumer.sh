#!/usr/bin/env bash
# find_package_consumer.sh BUILD_DIR WORK_DIR: installs lockstep from BUILD_DIR into a prefix
# and builds and runs a separate project that uses find_package(lockstep).
set -euo pipefail
build="$1"; work="$2"; here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# The plugins (the CUDA backend, NCCL: only in a CUDA build) are installed with their libraries found.
for plugin in "$build"/lib/liblockstep_*.so; do
  [[ -e "$plugin" ]] || continue
  installed="$(find "$work/prefix" -name "$(basename "$plugin")" | head -1)"
  [[ -n "$installed" ]] || { echo "FAIL: $(basename "$plugin") was not installed"; exit 1; }
  if ldd "$installed" | grep "not found"; then echo "FAIL: $installed needs libraries it cannot find"; exit 1; fi
done
cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
