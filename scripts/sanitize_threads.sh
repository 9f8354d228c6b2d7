#!/usr/bin/env bash
# The distributed code's threads under ThreadSanitizer: builds build-tsan/ (LOCKSTEP_SANITIZE=thread,
# RelWithDebInfo, CUDA off; only the test binaries below and the lockstep CLI) and runs
#   - distribute_tests (replica threads, collective groups, overlapped exchange, sharded updates,
#     custom loops);
#   - the MultiWorker tests on 2 ranks under mpirun (where lockstep is built with MPI);
#   - the GPU tests on 2 emulated GPUs (replicas on devices and logical replicas on one, their
#     fences, fit's uploads ahead, captured steps and their replays: gpu.emulated);
#   - the training and tensor tests of fit's input read ahead, steps_per_execution, gradient
#     accumulation, deferred reads, the stop signals and preemption, jit_compile and the step
#     block, and step capture;
#   - `lockstep train`: on 2 CPU replicas with LOCKSTEP_PHASE_TIMES=1 (the phase timers) and
#     --steps-per-execution 3; on emulated GPUs as gpu:0x2, gpu:0,gpu:1 and gpu:0 with
#     --jit-compile on (replays); and a run stopped by SIGTERM (status 143, the stop-signal thread).
# Any report fails the run (halt_on_error); tests/tsan.supp lists uninstrumented libraries'
# reports (oneDNN, Open MPI's TCP transport). Not part of scripts/test.sh: it builds the library a
# second time.
#   scripts/sanitize_threads.sh [gtest filter]   (a filter runs only the test binaries, under it)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build=build-tsan
source scripts/sanitizer_build.sh
sanitizer_build "$build" thread distribute_tests gpu_tests training_tests tensor_tests lockstep_cli
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$repo_root/tests/tsan.supp"
filter="${1:-}"
run() {  # binary, default filter
  echo "== $1 ${filter:-$2}"
  "$build/tests/$1" --gtest_filter="${filter:-$2}" --gtest_brief=1
}
run distribute_tests '*'
if grep -q "LOCKSTEP_WITH_MPI:BOOL=ON" "$build/CMakeCache.txt" && command -v mpirun >/dev/null; then
  echo "== mpirun -np 2 distribute_tests MultiWorker.*"
  tests/cli/mpirun.sh 2 -x TSAN_OPTIONS -- "$build/tests/distribute_tests" --gtest_filter='MultiWorker.*' --gtest_brief=1
fi
echo "== LOCKSTEP_EMULATED_GPUS=2"
LOCKSTEP_EMULATED_GPUS=2 run gpu_tests 'Gpu*'
run training_tests 'FitInput.*:DistributedInput.*:StepsPerExecution.*:GradientAccumulation.*:DeferredReads.*:StopSignals.*:Preemption.*:JitCompile.*:StepState.*'
run tensor_tests 'StepCapture*:StepGraph.*'
[[ -n "$filter" ]] && { echo "sanitize_threads: clean"; exit 0; }

work="$(mktemp -d)"
trap '[[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
train() {  # name, flags...: a short lockstep train run
  local name="$1"
  shift
  echo "== lockstep train $*"
  "$build/bin/lockstep" train --global-batch-size 32 --epochs 1 --steps-per-epoch 12 --verbose 0 --no-tensorboard \
    --logdir "$work/$name" "$@" >"$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
}
LOCKSTEP_PHASE_TIMES=1 train phases --devices cpu:2
grep "phase times" "$work/phases.out"
train spe --devices cpu:2 --steps-per-execution 3
export LOCKSTEP_EMULATED_GPUS=2
train logical --devices gpu:0x2
train gpus --devices gpu:0,gpu:1 --steps-per-execution 3
train replay --devices gpu:0 --jit-compile on
unset LOCKSTEP_EMULATED_GPUS
# SIGTERM once the first backup is written: the stop-signal thread takes it, fit stops at a
# step boundary with a backup, and the process ends with status 128 + 15.
echo "== lockstep train, SIGTERM after its first backup"
set -m  # (a background job of a shell without job control starts with SIGINT ignored)
"$build/bin/lockstep" train --devices cpu:2 --global-batch-size 32 --epochs 1 --steps-per-epoch 100000 \
  --backup-every-steps 2 --verbose 0 --no-tensorboard --logdir "$work/signal" >"$work/signal.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -f "$work/signal/backup/checkpoint" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/signal.out"; echo "FAIL: the run ended before its first backup"; exit 1; }
  sleep 0.5
done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[[ "$status" == 143 ]] || { cat "$work/signal.out"; echo "FAIL: status $status after SIGTERM, not 143"; exit 1; }
grep "^Interrupted by SIGTERM" "$work/signal.out"
echo "sanitize_threads: clean"
