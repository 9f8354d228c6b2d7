#!/usr/bin/env bash
# no_gpu_notice_once.sh CLI MPIRUN_SH WORK : the "no GPU visible" notice is printed once per job:
# as often by 2 MPI workers (worker 0 only) as by one process (once where GPUs are built and
# none is visible, as on CI; never where one is).
set -uo pipefail
cli="$1"; mpirun="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work"
flags=(train --epochs 1 --steps-per-epoch 2 --verbose 0 --no-tensorboard)
one="$("$cli" "${flags[@]}" --logdir "$work/one" 2>&1)" || { echo "$one"; echo "FAIL: the one-process run failed"; exit 1; }
two="$("$mpirun" 2 -- "$cli" "${flags[@]}" --logdir "$work/two" 2>&1)" || { echo "$two"; echo "FAIL: the mpirun run failed"; exit 1; }
echo "$two"
a="$(grep -c "no GPU visible" <<<"$one")"; b="$(grep -c "no GPU visible" <<<"$two")"
[[ "$a" -eq "$b" ]] || { echo "FAIL: 2 workers print the notice $b times, one process $a"; exit 1; }
echo "ok: 2 workers print the notice $b time(s), as one process does"
