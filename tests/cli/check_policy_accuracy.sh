#!/usr/bin/env bash
# check_policy_accuracy.sh MAX_POINTS CLI POLICY... : trains the flagship (`lockstep train`, same
# seed and flags) under float32 and under each POLICY, and passes when every policy's test
# accuracy is within MAX_POINTS percentage points of float32's.
set -euo pipefail
max="$1"; cli="$2"; shift 2
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
accuracy() { sed -n 's/.*"test_accuracy": *\([0-9.eE+-]*\).*/\1/p' "$1"; }
run() {  # run POLICY: trains, prints its test accuracy
  "$cli" train --policy "$1" --verbose 2 --no-tensorboard --logdir "$dir/$1" --metrics-out "$dir/$1.json" >&2
  accuracy "$dir/$1.json"
}
base="$(run float32)"
[[ -n "$base" ]] || { echo "no test_accuracy for float32"; exit 1; }
status=0
for policy in "$@"; do
  acc="$(run "$policy")"
  if awk -v a="$acc" -v b="$base" -v m="$max" 'BEGIN { d = (b - a) * 100; if (d < 0) d = -d; exit !(a != "" && d <= m) }'; then
    echo "ok: $policy test_accuracy $acc, float32 $base (within $max points)"
  else
    echo "FAIL: $policy test_accuracy '$acc', float32 $base (more than $max points apart)"; status=1
  fi
done
exit $status
