#!/usr/bin/env bash
# The test of the skip (issue 13): on a machine without a GPU, every GPU test of gpu_tests
# must skip (exit 77, naming why) and the no-device checks (gpu:0 is a clear error) must pass.
# On a machine with a GPU this check does not apply: exit 77.
set -uo pipefail
bin="$1"
count_line="$("$bin" --gtest_filter=NoDevice.ReportsHowManyGpusAreVisible 2>&1 | grep -m1 'GPUs visible:')"
gpus="${count_line##*: }"
if [[ -z "$gpus" ]]; then echo "FAIL: gpu_tests did not report the GPUs it sees"; exit 1; fi
if [[ "$gpus" != "0" ]]; then echo "$gpus GPU(s) visible: the skip does not apply here"; exit 77; fi

fail=0
# The no-device checks pass.
if ! "$bin" --gtest_filter='NoDevice.*'; then echo "FAIL: the no-device checks failed"; fail=1; fi
# Every other test skips, one by one as ctest runs them, with exit 77 and a reason.
mapfile -t tests < <("$bin" --gtest_list_tests --gtest_filter='-NoDevice.*' |
                     awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')
if [[ ${#tests[@]} -lt 5 ]]; then echo "FAIL: only ${#tests[@]} GPU tests are registered"; fail=1; fi
for t in "${tests[@]}"; do
  out="$("$bin" --gtest_filter="$t" 2>&1)"
  rc=$?
  if [[ $rc -ne 77 ]]; then echo "FAIL: $t exited $rc without a GPU (expected 77, skipped):"; echo "$out"; fail=1; continue; fi
  if ! grep -q 'no GPU is visible\|built without CUDA' <<<"$out"; then
    echo "FAIL: $t skipped without saying why:"; echo "$out"; fail=1
  fi
done
[[ $fail -eq 0 ]] && echo "all ${#tests[@]} GPU tests skip cleanly without a device"
exit $fail
