#!/usr/bin/env bash
# multi_worker_signal.sh LOCKSTEP MPIRUN_SH WORK : SIGTERM, SIGINT and SIGHUP under mpirun -np 2
# (issue 41, item 9). A signal reaching one worker, or each worker its own, stops every worker
# after the same step: each prints "Interrupted by SIG... (sent to worker N) at epoch 1, step S",
# the chief writes the backup of step S, the job exits non-zero at once; --resume then ends with
# weights bit-identical to an uninterrupted run's.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mpi_ranks.sh"  # rank_pid
cli="$1"; mpirun="$2"; work="$3"
flags=(train --devices cpu:1 --epochs 2 --steps-per-epoch 1500 --backup-every-steps 200 --verbose 0 --seed 3
       --no-tensorboard --collective-timeout 60)
export LOCKSTEP_VERBOSE_RESUME=1
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $1"; cat "$work"/*.log "$work"/rank*.err 2>/dev/null | tail -n 60; exit 1; }
# start LOGDIR: the job in the background (job: mpirun's pid), rank R's stderr in rankR.err
start() {
  rm -f "$work"/rank*.err
  "$mpirun" 2 -- bash -c 'exec "$@" 2> "$0/rank$OMPI_COMM_WORLD_RANK.err"' "$work" "$cli" "${flags[@]}" \
    --logdir "$1" > job.log 2>&1 &
  job=$!
  for _ in $(seq 1200); do [[ -f "$1/backup/checkpoint" ]] && return; sleep 0.05; done
  fail "no backup appeared in $1"
}
# stopped SIG: the job exits non-zero within 20 s; both ranks name SIG and the same step; sets step
stopped() {
  local t0=$SECONDS rc=0
  wait "$job" || rc=$?
  (( rc != 0 )) || fail "the job exited 0 after a signal"
  (( SECONDS - t0 <= 20 )) || fail "the job took $((SECONDS - t0)) s to stop"
  local lines=()
  for r in 0 1; do
    lines+=("$(grep -E "^Interrupted by SIG$1 \(sent to worker [01]\) at epoch 1, step [0-9]+: " "rank$r.err")") \
      || fail "rank $r printed no 'Interrupted by SIG$1 (sent to worker N) at epoch 1, step S' line"
  done
  [[ "${lines[0]%%:*}" == "${lines[1]%%:*}" ]] || fail "the ranks stopped at different steps: ${lines[*]}"
  grep -q "backup saved in " rank0.err || fail "the chief saved no backup"
  step="$(sed -E 's/.*step ([0-9]+):.*/\1/' <<<"${lines[0]}")"
  echo "ok: SIG$1: ${lines[0]%%:*} on both ranks, mpirun status $rc, $((SECONDS - t0)) s"
}

"$mpirun" 2 -- "$cli" "${flags[@]}" --logdir "$work/whole" > whole.log 2>&1 || fail "the uninterrupted run failed"

# 1. SIGTERM to worker 1 alone.
start "$work/term"
pid="$(rank_pid "$job" 1)"; [[ -n "$pid" ]] || fail "no rank 1 under mpirun $job"
kill -TERM "$pid"
stopped TERM
grep -q "(sent to worker 1)" rank0.err || fail "rank 0 does not name worker 1 as the one signalled"
"$mpirun" 2 -- "$cli" "${flags[@]}" --logdir "$work/term" --resume > resumed.log 2>&1 || fail "--resume failed"
grep -q "Resuming from backup: epoch 1, batch $step," resumed.log || fail "the resume did not start at epoch 1, batch $step"
cmp "$work/whole/model/weights.safetensors" "$work/term/model/weights.safetensors" || fail "resumed weights differ"
echo "ok: resumed bit-identical to the uninterrupted run"

# 2. Each worker its own signal (they may reach the workers at different steps): still one step
# for both, named after the lower worker whose signal had come by then.
start "$work/both"
pid0="$(rank_pid "$job" 0)"; pid1="$(rank_pid "$job" 1)"
[[ -n "$pid0" && -n "$pid1" ]] || fail "no ranks under mpirun $job"
kill -INT "$pid0"; kill -HUP "$pid1"
stopped "(INT|HUP)"
