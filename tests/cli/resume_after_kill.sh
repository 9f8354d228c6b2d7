#!/usr/bin/env bash
# resume_after_kill.sh LOCKSTEP: trains once without interruption, then trains the same run
# again while SIGKILLing it at several moments (backups every few steps, so some kills land
# inside a backup write) and resuming with --resume each time. Passes when the interrupted
# run ends with bit-identical weights and at least one resume happened mid-epoch.
set -euo pipefail
cli="$1"
work="$(mktemp -d)"
trap 'kill -9 "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
args=(train --epochs 2 --steps-per-epoch 1500 --batch-size 32 --devices cpu:2 --seed 7
      --backup-every-steps 5 --verbose 0 --no-tensorboard)
export LOCKSTEP_VERBOSE_RESUME=1

"$cli" "${args[@]}" --logdir "$work/ref" >/dev/null

start() {
  if [[ -f "$work/run/backup/checkpoint" ]]; then
    "$cli" "${args[@]}" --logdir "$work/run" --resume >>"$work/log" 2>&1 &
  else
    rm -rf "$work/run"
    "$cli" "${args[@]}" --logdir "$work/run" >>"$work/log" 2>&1 &
  fi
  pid=$!
}

kills=0
start
for delay in 1.6 1.1 1.9 1.3 1.7 1.2; do
  sleep "$delay"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null || true
  [[ -f "$work/run/model/weights.safetensors" ]] && break
  start
done
wait "$pid"
echo "killed $kills time(s); resumes:"
grep "Resuming from backup" "$work/log" || true
grep -Eq "Resuming from backup: epoch [12], batch [1-9]" "$work/log" || {
  echo "FAIL: no resume happened mid-epoch"; cat "$work/log"; exit 1; }
if cmp "$work/ref/model/weights.safetensors" "$work/run/model/weights.safetensors"; then
  echo "ok: the resumed run's weights are bit-identical to the uninterrupted run's"
else
  echo "FAIL: weights differ"; exit 1
fi
