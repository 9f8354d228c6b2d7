#!/usr/bin/env bash
# check_metrics.sh MIN_ACCURACY CMD... : runs CMD with --metrics-out FILE appended and passes
# when the JSON's test_accuracy >= MIN_ACCURACY.
set -euo pipefail
min="$1"; shift
out="$(mktemp -d)/metrics.json"
"$@" --verbose 2 --metrics-out "$out"
acc="$(sed -n 's/.*"test_accuracy": *\([0-9.eE+-]*\).*/\1/p' "$out")"
[[ -n "$acc" ]] || { echo "no test_accuracy in $out"; cat "$out"; exit 1; }
if awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }'; then
  echo "ok: test_accuracy $acc >= $min"
else
  echo "FAIL: test_accuracy $acc < $min"; exit 1
fi
