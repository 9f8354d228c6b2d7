#!/usr/bin/env bash
# Runs a gtest binary with the given filter; exit 77 (ctest: skipped) when every selected test
# skipped (gtest prints "[  SKIPPED ]" and runs nothing else), else the binary's status.
set -uo pipefail
out="$("$@" 2>&1)"
rc=$?
printf '%s\n' "$out"
[[ $rc -ne 0 ]] && exit $rc
if grep -q '^\[  SKIPPED \]' <<<"$out" && ! grep -q '^\[       OK \]' <<<"$out"; then exit 77; fi
exit 0
