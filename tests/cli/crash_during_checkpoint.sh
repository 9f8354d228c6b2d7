#!/usr/bin/env bash
# crash_during_checkpoint.sh LOCKSTEP: kills training exactly inside backup writes (the tensor
# file, the JSON state and the pointer file of a backup, through LOCKSTEP_CRASH_AT_WRITE), resumes
# each time, and passes when the final weights are bit-identical to an uninterrupted run's.
set -euo pipefail
cli="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
args=(train --epochs 2 --steps-per-epoch 100 --batch-size 32 --devices cpu:2 --seed 11
      --backup-every-steps 10 --verbose 0 --no-tensorboard)
"$cli" "${args[@]}" --logdir "$work/ref" >/dev/null
# A backup is three atomic writes (tensors, state, pointer). Crash inside each kind in turn.
crashes=0
for n in 16 8 12; do
  resume=()
  [[ -f "$work/run/backup/checkpoint" ]] && resume=(--resume)
  if LOCKSTEP_CRASH_AT_WRITE=$n "$cli" "${args[@]}" --logdir "$work/run" "${resume[@]}" >/dev/null 2>&1; then
    echo "FAIL: the run with LOCKSTEP_CRASH_AT_WRITE=$n was not killed"; exit 1
  fi
  crashes=$((crashes + 1))
  ls "$work/run/backup" | grep -q '\.tmp\.' && echo "crash $crashes left a torn temporary file (expected)"
done
LOCKSTEP_VERBOSE_RESUME=1 "$cli" "${args[@]}" --logdir "$work/run" --resume 2>&1 >/dev/null | grep "Resuming" || true
cmp "$work/ref/model/weights.safetensors" "$work/run/model/weights.safetensors"
echo "ok: $crashes crashes inside checkpoint writes; the resumed run's weights are bit-identical"
