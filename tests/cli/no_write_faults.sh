#!/usr/bin/env bash
# no_write_faults.sh LOCKSTEP : the shipped binary has none of the test build's write faults
# (tests/cli/write_faults.cpp): with both asked for, a short run writes its metrics and
# backups and exits 0, neither killed at the first write nor failing with ENOSPC.
set -uo pipefail
cli="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
LOCKSTEP_CRASH_AT_WRITE=1 LOCKSTEP_INJECT_ENOSPC="$work/m.json" \
  "$cli" train --batch-size 8 --devices cpu:1 --verbose 0 --no-tensorboard --steps-per-epoch 2 --epochs 1 \
  --logdir "$work/run" --metrics-out "$work/m.json" >"$work/out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: exit $rc with the test build's faults asked for"; cat "$work/out"; exit 1; }
[[ -s "$work/m.json" ]] || { echo "FAIL: no metrics file written"; exit 1; }
echo "ok: the shipped binary ignores LOCKSTEP_CRASH_AT_WRITE and LOCKSTEP_INJECT_ENOSPC"
