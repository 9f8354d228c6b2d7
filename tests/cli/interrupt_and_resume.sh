#!/usr/bin/env bash
# interrupt_and_resume.sh LOCKSTEP: SIGTERM, SIGINT or SIGHUP during the first epoch stops
# lockstep train at a step boundary: status 128 + the signal's number, one line naming the
# epoch, the step and the backup, and a backup made at that step; --resume then ends with
# weights bit-identical to an uninterrupted run's.
#
# The signal follows observed progress, not the clock: it is sent once the run has written its
# first backup (after 5 of the first epoch's 1000 steps).
set -euo pipefail
cli="$(realpath "$1")"
work="$(mktemp -d)"
# Only a pid that was set: "kill -9 0" would kill the whole process group, ctest included.
trap '[[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
# Without job control a shell's background jobs start with SIGINT ignored, and lockstep leaves
# an ignored signal ignored (as nohup expects of SIGHUP): job control gives them the default.
set -m
args=(train --epochs 2 --steps-per-epoch 1000 --batch-size 32 --devices cpu:2 --seed 7
      --backup-every-steps 5 --verbose 0 --no-tensorboard)
export LOCKSTEP_VERBOSE_RESUME=1

"$cli" "${args[@]}" --logdir "$work/ref" >/dev/null

latest() { sed -n 's/.*"latest": *"\([^"]*\)".*/\1/p' "$1/backup/checkpoint" 2>/dev/null || true; }
fail() {
  echo "FAIL ($sig): $1"; cat "$log"
  # A crash leaves a core in the run's folder (core_pattern "core"): its threads' stacks say where.
  local core; core="$(ls "$work"/core* 2>/dev/null | head -n 1 || true)"
  if [[ -n "$core" ]] && command -v gdb >/dev/null; then
    gdb -batch -ex "thread apply all bt 12" "$cli" "$core" 2>/dev/null | tail -n 150
  fi
  exit 1
}
ulimit -c unlimited 2>/dev/null || true

for sig in TERM INT HUP; do
  run="$work/run_$sig"
  log="$work/log_$sig"
  (cd "$work" && exec "$cli" "${args[@]}" --logdir "$run") >"$log" 2>&1 &
  pid=$!
  waited=0
  until [[ -n "$(latest "$run")" ]]; do
    kill -0 "$pid" 2>/dev/null || fail "the run ended before its first backup"
    sleep 0.01
    waited=$((waited + 1))
    (( waited < 12000 )) || fail "no backup after 2 minutes"
  done
  kill -s "$sig" "$pid"
  status=0
  wait "$pid" || status=$?
  pid=
  want=$((128 + $(kill -l "$sig")))
  (( status == want )) || fail "exit status $status, want $want (128 + SIG$sig)"
  line="$(grep -E "^Interrupted by SIG$sig at epoch 1, step [0-9]+: backup saved in $run/backup; resume with --resume\$" \
          "$log")" || fail "no 'Interrupted by SIG$sig at epoch 1, step N: backup saved ...' line"
  step="$(sed -E 's/.*step ([0-9]+):.*/\1/' <<<"$line")"
  [[ ! -e "$run/model" ]] || fail "an interrupted run saved a final model"
  "$cli" "${args[@]}" --logdir "$run" --resume >>"$log" 2>&1 || fail "--resume failed"
  grep -q "Resuming from backup: epoch 1, batch $step," "$log" || fail "the resume did not start at epoch 1, batch $step"
  cmp "$work/ref/model/weights.safetensors" "$run/model/weights.safetensors" || fail "weights differ"
  echo "ok: SIG$sig at epoch 1, step $step: status $status, resumed bit-identical"
done
