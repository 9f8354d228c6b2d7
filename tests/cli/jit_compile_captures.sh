#!/usr/bin/env bash
# jit_compile_captures.sh LOCKSTEP MODEL : `lockstep train --model MODEL` on an emulated GPU
# (LOCKSTEP_EMULATED_GPUS=1, which captures as a real one does) captures its train and test steps:
# jit_compile="auto" names no reason to run them eagerly (it says one, once per step function,
# where it cannot capture them), and the run ends well.
set -uo pipefail
cli="$1" model="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
LOCKSTEP_EMULATED_GPUS=1 timeout 300 "$cli" train --model "$model" --devices gpu:0 --global-batch-size 16 \
  --epochs 1 --steps-per-epoch 4 --dim 16 --depth 1 --verbose 0 --no-tensorboard --logdir "$work/run" >"$work/log" 2>&1
rc=$?
if [[ $rc -ne 0 ]] || grep -q 'jit_compile' "$work/log"; then
  cat "$work/log"
  echo "FAIL: lockstep train --model $model on an emulated gpu:0 exited $rc or ran steps eagerly (above)"
  exit 1
fi
echo "ok: --model $model captures its steps on an emulated GPU"
