#!/usr/bin/env bash
# multi_worker_agree.sh LOCKSTEP MPIRUN_SH CASE : `mpirun -np 2 lockstep train` whose rank 1 is
# started otherwise than rank 0 (issue 41, items 5 and 10); each CASE is one ctest entry
# (multi_worker.agree.CASE). A difference in --learning-rate, --seed or --data stops both ranks
# with a non-zero status naming the flag and the workers; a rank failing a start-up check (its
# --data missing, or the chief's run directory taken) stops the other at once, not after the
# collective timeout, and so does one failing after it (training already begun); equal flags train.
set -uo pipefail
cli="$1"; mpirun="$2"; case="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# npz FILE SEED: 16 examples of 2x2 uint8 pixels, labels 0/1 (tiny_npz.py).
npz() { python3 "$(dirname "${BASH_SOURCE[0]}")/tiny_npz.py" "$@" || { echo "FAIL: could not write $1"; exit 1; }; }
npz "$work/a.npz" 1
npz "$work/b.npz" 2
# A collective timeout far above the bound below: a stop within it is not the timeout's.
base=(train --batch-size 2 --devices cpu:1 --verbose 0 --no-tensorboard --epochs 1 --steps-per-epoch 2
      --collective-timeout 120 --logdir "$work/run")
# run RANK0_FLAGS... -- RANK1_FLAGS... : both ranks; rank R's stderr in $work/rankR.err
run() {
  local r0=() r1=()
  while [[ "$1" != "--" ]]; do r0+=("$1"); shift; done
  shift; r1=("$@")
  local start=$SECONDS
  local rank=(bash -c 'exec "$@" 2> "$0/rank$OMPI_COMM_WORLD_RANK.err"' "$work")
  rm -f "$work"/rank*.err
  timeout 100 "$mpirun" 1 -- "${rank[@]}" "$cli" "${base[@]}" "${r0[@]}" : -np 1 "${rank[@]}" "$cli" "${base[@]}" \
    "${r1[@]}" > "$work/out.log" 2>&1
  rc=$?
  elapsed=$((SECONDS - start))
  cat "$work/out.log" "$work"/rank*.err
}
# refused REGEX_RANK0 REGEX_RANK1: both ranks printed an error matching theirs, mpirun's status is
# not 0, within 30 s (the collective timeout is 120 s)
refused() {
  [[ $rc -ne 0 ]] || { echo "FAIL: mpirun exited 0"; exit 1; }
  [[ $rc -ne 124 ]] || { echo "FAIL: the job hung"; exit 1; }
  grep -Eq "^error: .*$1" "$work/rank0.err" || { echo "FAIL: rank 0 did not say /$1/"; exit 1; }
  grep -Eq "^error: .*$2" "$work/rank1.err" || { echo "FAIL: rank 1 did not say /$2/"; exit 1; }
  [[ $elapsed -lt 30 ]] || { echo "FAIL: took ${elapsed}s (the collective timeout is 120 s)"; exit 1; }
  ! grep -q "test_accuracy" "$work/out.log" || { echo "FAIL: a worker trained"; exit 1; }
  echo "ok: both ranks refused in ${elapsed}s"
}

case "$case" in
learning_rate)
  run --data "$work/a.npz" --learning-rate 0.001 -- --data "$work/a.npz" --learning-rate 0.01
  both="workers disagree on --learning-rate: worker 0 has 0.001[0-9]*, worker 1 has 0.01"
  refused "$both" "$both"
  ;;
seed)
  run --data "$work/a.npz" --seed 1 -- --data "$work/a.npz" --seed 2
  refused "workers disagree on --seed: worker 0 has 1, worker 1 has 2" "workers disagree on --seed: worker 0 has 1, worker 1 has 2"
  ;;
data)  # another file with other contents: the path and the data's fingerprint both differ
  run --data "$work/a.npz" -- --data "$work/b.npz"
  both="workers disagree on --data: worker 0 has [^,]*a\.npz, worker 1 has [^;]*b\.npz; the data: worker 0 has"
  refused "$both" "$both"
  ;;
failed_check)  # rank 1's --data is missing: its own error, and rank 0 stops at once naming it
  run --data "$work/a.npz" -- --data "$work/missing.npz"
  refused "worker 1 failed a start-up check" "missing\.npz"
  ;;
run_directory_taken)  # the chief's --logdir holds a run (a check after the agreement): rank 1 stops at once
  run --data "$work/a.npz" -- --data "$work/a.npz"
  [[ $rc -eq 0 ]] || { echo "FAIL: the first run: mpirun exited $rc"; exit 1; }
  run --data "$work/a.npz" -- --data "$work/a.npz"
  refused "already holds a run" "worker 0 failed a start-up check"
  ;;
fails_after_agreement|fails_after_agreement_over_mpi_messages)
  # The chief fails once training began (its TensorBoard folder is a file): rank 1, already in
  # a collective, stops at once naming worker 0 and its error, through shared memory or MPI.
  [[ "$case" == *mpi_messages ]] && export LOCKSTEP_WORKER_SHM=0
  with_tensorboard=()
  for flag in "${base[@]}"; do [[ "$flag" == --no-tensorboard ]] || with_tensorboard+=("$flag"); done
  base=("${with_tensorboard[@]}")
  mkdir -p "$work/run" && : > "$work/run/train"
  run --data "$work/a.npz" -- --data "$work/a.npz"
  refused "$work/run/train" "worker 0 failed: .*$work/run/train"
  ;;
equal)
  run --data "$work/a.npz" --seed 3 -- --data "$work/a.npz" --seed 3
  [[ $rc -eq 0 ]] || { echo "FAIL: equal flags: mpirun exited $rc"; exit 1; }
  [[ "$(grep -c "test_accuracy" "$work/out.log")" -eq 1 ]] || { echo "FAIL: the chief did not report once"; exit 1; }
  ! grep -q "error" "$work"/rank*.err || { echo "FAIL: a worker reported an error"; exit 1; }
  echo "ok: equal flags train"
  ;;
*) echo "unknown case $case"; exit 2 ;;
esac
