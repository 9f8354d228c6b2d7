#!/usr/bin/env bash
# check_layering.py must fail on each kind of violation planted in a copy of the tree, name the
# file and the rule, and leave allowed uses (file readers, comments) alone.
#   planted_violations.sh REPO_ROOT
set -euo pipefail
repo="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for d in src include tools examples scripts; do cp -r "$repo/$d" "$work/$d"; done

# 1. Raw memory in a layer above the tensor layer (and a mention in a comment, which is fine).
cat >"$work/src/nn/planted_raw.cpp" <<'CPP'
#include "lockstep/tensor/tensor.hpp"
// A comment may say data<float>() without breaking the rule.
float first(lockstep::Tensor& t) { return t.data<float>()[0]; }
CPP
# 2. A private backend header included from the training layer.
cat >"$work/src/training/planted_include.cpp" <<'CPP'
#include "backend/context.hpp"
CPP
# 3. A CMake target that declares a layer it does not use (distribute as it was: nn).
sed -i 's/^lockstep_layer(distribute DEPS lockstep_autograd/lockstep_layer(distribute DEPS lockstep_nn lockstep_autograd/' \
  "$work/src/CMakeLists.txt"
grep -q 'lockstep_layer(distribute DEPS lockstep_nn' "$work/src/CMakeLists.txt" || { echo "could not plant the CMake edit"; exit 1; }

set +e
out="$(python3 "$work/scripts/check_layering.py" "$work" 2>&1)"
rc=$?
set -e
printf '%s\n' "$out"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -eq 1 ]] || fail "expected exit 1, got $rc"
grep -q '^src/nn/planted_raw.cpp:3: raw-access' <<<"$out" || fail "raw access in src/nn not reported at line 3"
grep -q '^src/nn/planted_raw.cpp:2:' <<<"$out" && fail "a comment was reported"
grep -q '^src/training/planted_include.cpp:1: private-header' <<<"$out" || fail "private header not reported"
grep -q "cmake-deps: layer 'distribute' lists nn but includes nothing from them" <<<"$out" || fail "CMake deps not reported"
grep -q '^src/data/npy.cpp' <<<"$out" && fail "an allowed file reader was reported"
echo "ok: every planted violation was reported, nothing else from the plants"
