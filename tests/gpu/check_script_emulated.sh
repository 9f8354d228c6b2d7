#!/usr/bin/env bash
# scripts/gpu_check.sh --emulated (no GPU needed) on the parts whose figures are lockstep's own:
# the custom loop (issue 42.1), gpu_bench's bare steps (37.1, 37.2's lockstep side), `lockstep train`
# through fit (37.1, 37.3, 37.4) with its phase times. Each runs to its end on emulated GPUs, and
# the accept script finds every figure it reads from them (a ratio, not MISSING); the parts only a
# real GPU serves are skipped, saying so; the logs come back packed. The figures are the CPU's: no
# goal is checked but the custom loop's accuracy (its run is not shrunk).
#   tests/gpu/check_script_emulated.sh BUILD_DIR OUT_DIR
set -uo pipefail
build="$1" out="$2"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rm -rf "$out" && mkdir -p "$out"
parts=custom_loop,gpu_bench,fit_b64,fit_b1024,fit_b1024_x4,wide_f32,wide_bf16,torch_reference,memcheck
OUT="$out" "$repo/scripts/gpu_check.sh" --emulated --only "$parts" "$build" >"$out/stdout.txt" 2>&1
rc=$?
report="$out/gpu_check_report.txt"
cat "$report" 2>/dev/null || cat "$out/stdout.txt"
fail=0
[[ $rc -eq 0 ]] || { echo "FAIL: gpu_check.sh --emulated exited $rc"; fail=1; }
expect() {  # expect COUNT REGEX: COUNT lines of the report match
  local n; n="$(grep -cE -- "$2" "$report" 2>/dev/null)"
  [[ "$n" -eq "$1" ]] || { echo "FAIL: $n line(s) of the report match /$2/, expected $1"; fail=1; }
}
expect 1 '^EMULATED GPUs'
expect 1 '^ACCEPT 42\.1 +ratio=0\.9[7-9][0-9]* .* PASS '
expect 2 '^ACCEPT 37\.1 +ratio=[0-9]'
expect 3 '^ACCEPT 37\.2 .* lockstep [0-9][0-9.]* steps/s, torch n/a'
expect 1 '^ACCEPT 37\.3 +ratio=[0-9].*mixed_bfloat16'
expect 1 '^ACCEPT 37\.4 +ratio=[0-9]'
expect 1 '^SUMMARY issue 37 points 1-4 and 42.1: '
# Where each fit run's time went (LOCKSTEP_PHASE_TIMES=1 in every fit part): fit's loop per step.
expect 1 '^INFO phases fit_b64: fit loop, ms per step over [0-9]+ steps: input wait [0-9.]+ step [0-9.]+ read'
expect 1 '^INFO phases fit_b1024: fit loop, ms per step over [0-9]+ steps: input wait [0-9.]+ step [0-9.]+ read'
expect 1 '^==== torch_reference: SKIPPED \(--emulated: reference_gpu.py needs a real GPU\)'
expect 1 '^==== memcheck: SKIPPED \(--emulated: compute-sanitizer needs a real GPU\)'
listing="$(tar -tzf "$out/gpu_check_logs.tar.gz" 2>/dev/null)"
for f in custom_loop.log gpu_bench.log fit_b64.json fit_b1024_x4.json wide_bf16.json status.tsv; do
  grep -q "/$f$" <<<"$listing" || { echo "FAIL: gpu_check_logs.tar.gz lacks $f"; fail=1; }
done
[[ $fail -eq 0 ]] && echo "ok: every part ran on emulated GPUs and the accept script found each figure"
exit $fail
