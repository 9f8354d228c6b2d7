#!/usr/bin/env bash
# resume_after_kill.sh LOCKSTEP: trains once without interruption, then trains the same run
# again while SIGKILLing it and resuming with --resume each time. Passes when the interrupted
# run ends with bit-identical weights and at least one resume happened mid-epoch.
#
# The kills follow observed progress, not the clock: each one comes after the run has written
# a growing number of new backups (1, 2, 4, ...), so the test does the same thing on a fast
# machine and in a ThreadSanitizer build (fixed delays once landed before the first backup
# there, or after the end on a fast machine).
set -euo pipefail
cli="$1"
work="$(mktemp -d)"
# Only a pid that was set: "kill -9 0" would kill the whole process group, ctest included.
trap '[[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
args=(train --epochs 2 --steps-per-epoch 300 --batch-size 32 --devices cpu:2 --seed 7
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
latest() { sed -n 's/.*"latest": *"\([^"]*\)".*/\1/p' "$work/run/backup/checkpoint" 2>/dev/null || true; }
finished() { [[ -f "$work/run/model/weights.safetensors" ]] || ! kill -0 "$pid" 2>/dev/null; }

# Waits until the running process has written `n` backups beyond the one it started from (or
# has finished); fails when it makes no progress for two minutes.
wait_for_backups() {
  local n="$1" seen last waited=0
  seen=0; last="$(latest)"
  while (( seen < n )); do
    finished && return 0
    sleep 0.02
    local now; now="$(latest)"
    if [[ "$now" != "$last" ]]; then seen=$((seen + 1)); last="$now"; waited=0; fi
    waited=$((waited + 1))
    (( waited < 6000 )) || { echo "FAIL: no new backup for 2 minutes"; cat "$work/log"; exit 1; }
  done
}

kills=0
start
for n in 1 2 4 8 16 32; do  # 63 backups of 5 steps in all: the last kill lands in epoch 2
  wait_for_backups "$n"
  finished && break
  kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
  wait "$pid" 2>/dev/null || true
  start
done
wait "$pid"
pid=
echo "killed $kills time(s); resumes:"
grep "Resuming from backup" "$work/log" || true
(( kills > 0 )) || { echo "FAIL: the run finished before any kill"; cat "$work/log"; exit 1; }
grep -Eq "Resuming from backup: epoch [12], batch [1-9]" "$work/log" || {
  echo "FAIL: no resume happened mid-epoch"; cat "$work/log"; exit 1; }
if cmp "$work/ref/model/weights.safetensors" "$work/run/model/weights.safetensors"; then
  echo "ok: the resumed run's weights are bit-identical to the uninterrupted run's"
else
  echo "FAIL: weights differ"; exit 1
fi
