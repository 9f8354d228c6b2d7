#!/usr/bin/env bash
# The distributed code's threads under ThreadSanitizer: builds build-tsan/ (LOCKSTEP_SANITIZE=thread,
# RelWithDebInfo, CUDA off; only distribute_tests, gpu_tests and the lockstep CLI) and runs
#   - distribute_tests (replica threads, collective groups, overlapped exchange, sharded updates,
#     custom loops), or the gtest filter given;
#   - the MultiWorker tests on 2 ranks under mpirun (where lockstep is built with MPI);
#   - the GPU tests on 2 emulated GPUs (replicas on devices, fit's uploads ahead: gpu.emulated);
#   - `lockstep train` on 2 CPU replicas with LOCKSTEP_PHASE_TIMES=1 (the phase timers).
# Any report fails the run (halt_on_error); tests/tsan.supp lists uninstrumented libraries'
# reports (oneDNN, Open MPI's TCP transport). Not part of scripts/test.sh: it builds the library a
# second time.
#   scripts/sanitize_threads.sh [gtest filter]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build=build-tsan
source scripts/sanitizer_build.sh
sanitizer_build "$build" thread distribute_tests gpu_tests lockstep_cli
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$repo_root/tests/tsan.supp"
echo "== distribute_tests ${1:-*}"
"$build/tests/distribute_tests" --gtest_filter="${1:-*}" --gtest_brief=1
if grep -q "LOCKSTEP_WITH_MPI:BOOL=ON" "$build/CMakeCache.txt" && command -v mpirun >/dev/null; then
  echo "== mpirun -np 2 distribute_tests MultiWorker.*"
  tests/cli/mpirun.sh 2 -x TSAN_OPTIONS -- "$build/tests/distribute_tests" --gtest_filter='MultiWorker.*' --gtest_brief=1
fi
echo "== LOCKSTEP_EMULATED_GPUS=2 gpu_tests Gpu*"
LOCKSTEP_EMULATED_GPUS=2 "$build/tests/gpu_tests" --gtest_filter='Gpu*' --gtest_brief=1
echo "== LOCKSTEP_PHASE_TIMES=1 lockstep train --devices cpu:2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
LOCKSTEP_PHASE_TIMES=1 "$build/bin/lockstep" train --devices cpu:2 --global-batch-size 64 --epochs 1 \
  --steps-per-epoch 16 --verbose 0 --no-tensorboard --logdir "$work/run" >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
grep -E "phase times|test_loss" "$work/out"
echo "sanitize_threads: clean"
