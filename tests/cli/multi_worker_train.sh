#!/usr/bin/env bash
# multi_worker_train.sh CLI MPIRUN_SH WORK MIN_ACCURACY [MPIRUN_ARGS...] -- [TRAIN_FLAGS...]
# Trains with `CLI train --devices cpu:2` in one process and with `mpirun -np 2 CLI train
# --devices cpu:1` (one device on each of two workers; $WORKER_DEVICES instead of cpu:1, e.g.
# gpu:0 with LOCKSTEP_EMULATED_GPUS=1 passed to the ranks) and passes when
#   - the two saved models are bit-identical (one local device per worker: the same fold),
#   - the multi-worker run's test accuracy is >= MIN_ACCURACY,
#   - exactly one set of outputs was written: one event file per TensorBoard folder, one
#     metrics file, nothing in the working directory the workers share.
set -euo pipefail
cli="$1"; mpirun="$2"; work="$3"; min="$4"; shift 4
mpi_args=()
while [[ $# -gt 0 && "$1" != "--" ]]; do mpi_args+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
flags=(--verbose 2 --seed 7 "$@")
rm -rf "$work" && mkdir -p "$work/cwd" && cd "$work/cwd"

"$cli" train --devices cpu:2 "${flags[@]}" --logdir "$work/one" --metrics-out "$work/one.json" > "$work/one.log" 2>&1 \
  || { cat "$work/one.log"; echo "FAIL: the one-process run failed"; exit 1; }
worker_devices="${WORKER_DEVICES:-cpu:1}"
# What the chief prints for them: "cpu:1" is one logical CPU device, cpu:0; a GPU is itself.
[[ "$worker_devices" == cpu:* ]] && shown=cpu:0 || shown="$worker_devices"
"$mpirun" 2 "${mpi_args[@]}" -- "$cli" train --devices "$worker_devices" "${flags[@]}" --logdir "$work/two" \
  --metrics-out "$work/two.json" > "$work/two.log" 2>&1 \
  || { cat "$work/two.log"; echo "FAIL: the mpirun run failed"; exit 1; }
cat "$work/two.log"

grep -q "Detected 2 devices: $shown on each of 2 workers" "$work/two.log" \
  || { echo "FAIL: the mpirun run did not train on 2 workers"; exit 1; }
for f in model.json weights.safetensors; do
  cmp "$work/one/model/$f" "$work/two/model/$f" || { echo "FAIL: model/$f differs between the layouts"; exit 1; }
done
echo "ok: the saved models are bit-identical"
acc="$(sed -n 's/.*"test_accuracy": *\([0-9.eE+-]*\).*/\1/p' "$work/two.json")"
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' || { echo "FAIL: test_accuracy $acc < $min"; exit 1; }
echo "ok: test_accuracy $acc >= $min"
for d in train validation; do
  n="$(find "$work/two/$d" -name 'events.out.tfevents.*' | wc -l)"
  [[ "$n" -eq 1 ]] || { ls -l "$work/two/$d"; echo "FAIL: $n event files in $d/, want 1 (only the chief writes)"; exit 1; }
done
[[ "$(grep -c "test_accuracy" "$work/two.log")" -eq 1 ]] || { echo "FAIL: more than one worker reported results"; exit 1; }
[[ -z "$(ls -A "$work/cwd")" ]] || { ls -lA "$work/cwd"; echo "FAIL: a worker wrote into the working directory"; exit 1; }
echo "ok: exactly one set of outputs"
