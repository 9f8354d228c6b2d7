#!/usr/bin/env bash
# multi_worker_kill.sh CLI MPIRUN_SH WORK : failures of a worker under mpirun -np 2.
#   1. SIGKILL worker 1 mid-training: the job exits non-zero within the collective timeout,
#      naming rank 1; the same mpirun with --resume then finishes with weights bit-identical
#      to an uninterrupted run.
#   2. SIGSTOP worker 1 (a stall, not a death): worker 0 fails within the timeout with an
#      error naming worker 1 and the collective it waited in.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mpi_ranks.sh"  # rank_pid, watchdog, bounded, wait_bounded
cli="$1"; mpirun="$2"; work="$3"
timeout_s=5
# Long enough (12,000 steps) that the job is still training when a worker is killed or stopped
# 0.3 s after the first backup: on an idle machine a step takes ~0.14 ms (3,000 steps once ended
# before the stop), on a loaded one (a container build) many times that.
flags=(train --devices cpu:1 --epochs 2 --steps-per-epoch 6000 --backup-every-steps 200 --verbose 2 --seed 3
       --no-tensorboard --collective-timeout "$timeout_s")
rm -rf "$work" && mkdir -p "$work" && cd "$work"
watchdog 540  # below ctest's TIMEOUT of 600 s: a hang reports its process tree

wait_for_backup() {  # wait_for_backup DIR: until a backup exists and training went on a little
  for _ in $(seq 600); do [[ -f "$1/backup/checkpoint" ]] && break; sleep 0.05; done
  [[ -f "$1/backup/checkpoint" ]] || { echo "FAIL: no backup appeared in $1"; exit 1; }
  sleep 0.3
}
# Runs the job in the background; sets job (mpirun's pid).
start() { "$mpirun" 2 -- "$cli" "${flags[@]}" "$@" & job=$!; }
# finish LOG START_SECONDS: waits for the job; fails unless it exited non-zero within the
# timeout (plus start-up slack), and unless no worker outlived it by more than the timeout.
finish() {
  local rc=0 ranks p
  ranks="$(pgrep -P "$job" || true)"
  wait_bounded "$job" $((timeout_s + 60)) "mpirun after a worker was lost" || rc=$?
  local took=$(( $(date +%s) - $2 ))
  [[ $rc -ne 0 ]] || { cat "$1"; echo "FAIL: the job exited 0 after a worker was lost"; exit 1; }
  (( took <= timeout_s + 20 )) || { cat "$1"; echo "FAIL: the job took ${took}s to stop"; exit 1; }
  for p in $ranks; do
    for _ in $(seq $(( (timeout_s + 10) * 10 ))); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      show_processes; kill -KILL "$p"; cat "$1"
      echo "FAIL: worker process $p still ran $((timeout_s + 10)) s after mpirun exited"; exit 1
    fi
  done
  echo "ok: exit status $rc after ${took}s"
}

bounded 300 whole.log "$mpirun" 2 -- "$cli" "${flags[@]}" --logdir "$work/whole" || { cat whole.log; exit 1; }

# 1. A worker dies.
start --logdir "$work/killed" > killed.log 2>&1
wait_for_backup "$work/killed"
pid="$(rank_pid "$job" 1)"; [[ -n "$pid" ]] || { echo "FAIL: no rank 1 under mpirun $job"; exit 1; }
t0=$(date +%s); kill -KILL "$pid"
finish killed.log "$t0"
grep -Eq "rank 1 .*(signal 9|Killed)|worker\(s\) 1 " killed.log || { cat killed.log; echo "FAIL: rank 1 is not named"; exit 1; }
echo "ok: the dead rank is named"
bounded 300 resumed.log "$mpirun" 2 -- "$cli" "${flags[@]}" --logdir "$work/killed" --resume || { cat resumed.log; exit 1; }
grep -q "Resuming from backup" resumed.log || { cat resumed.log; echo "FAIL: the rerun did not resume"; exit 1; }
cmp "$work/whole/model/weights.safetensors" "$work/killed/model/weights.safetensors" \
  || { echo "FAIL: the resumed run's weights differ from the uninterrupted run's"; exit 1; }
echo "ok: resumed weights are bit-identical to the uninterrupted run's"

# 2. A worker stalls.
start --logdir "$work/stalled" > stalled.log 2>&1
wait_for_backup "$work/stalled"
pid="$(rank_pid "$job" 1)"; [[ -n "$pid" ]] || { echo "FAIL: no rank 1 under mpirun $job"; exit 1; }
t0=$(date +%s); kill -STOP "$pid"
finish stalled.log "$t0"
kill -KILL "$pid" 2>/dev/null || true
grep -Eq "timed out after $((timeout_s * 1000)) ms on worker 0: worker\(s\) 1 never (sent their part|took this worker.s part)" stalled.log \
  || { cat stalled.log; echo "FAIL: worker 0's error does not name worker 1 and the collective"; exit 1; }
grep -E "timed out" stalled.log | head -1
echo "ok: a stalled worker is named"
