#!/usr/bin/env bash
# resume_elsewhere.sh LOCKSTEP : --resume onto other contents at the same --data path, or onto
# another device count (issue 41, item 10). Both are sound (the same global batch and steps):
# the run continues and says so in one line naming what changed; the same data on the same
# devices says nothing.
set -uo pipefail
cli="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $1"; cat "$work/out.log"; exit 1; }
npz() { python3 "$here/tiny_npz.py" "$@" || fail "could not write $1"; }
base=(train --data "$work/d.npz" --global-batch-size 4 --verbose 0 --no-tensorboard --steps-per-epoch 2
      --logdir "$work/run")
# train EPOCHS DEVICES [--resume]: exit 0 wanted; sets noted (the "Resuming on other inputs" lines)
train() {
  timeout 120 "$cli" "${base[@]}" --epochs "$1" --devices "$2" "${@:3}" > "$work/out.log" 2>&1 \
    || fail "--epochs $1 --devices $2 ${*:3} exited non-zero"
  noted="$(grep -c "Resuming on other inputs" "$work/out.log")"
}
npz "$work/d.npz" 1
train 1 cpu:1
train 2 cpu:1 --resume
[[ $noted -eq 0 ]] || fail "the same data and devices were said to differ"
echo "ok: the same data and devices: no note"

npz "$work/d.npz" 2  # other contents, same path
train 3 cpu:2 --resume
[[ $noted -eq 1 ]] || fail "want one 'Resuming on other inputs' line, got $noted"
grep -Eq "^Resuming on other inputs: --data '$work/d.npz' holds other contents than when the run started; the devices are 1 worker x cpu:0, cpu:1 \(the run was on 1 worker x cpu:0\);" \
  "$work/out.log" || fail "the line does not name the data and both device layouts"
echo "ok: other data and devices: $(grep "Resuming on other inputs" "$work/out.log")"

train 4 cpu:1 --resume  # the same (new) data, the first layout again
[[ $noted -eq 1 ]] && grep -Eq "^Resuming on other inputs: the devices are 1 worker x cpu:0 \(the run was on 1 worker x cpu:0, cpu:1\);" \
  "$work/out.log" || fail "another device count alone is not said in one line"
echo "ok: other devices alone: one line"
