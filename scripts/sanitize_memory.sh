#!/usr/bin/env bash
# The replica threads, step capture and replay, device error marks and kept constants, the input
# path, the optimizers' kernels, and sample weights and masks on losses and metrics, built with
# AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/ (CUDA off) and run, on the CPU
# and on 1 and 2 emulated GPUs. Not part of
# scripts/test.sh: it builds the library a second time.
#   scripts/sanitize_memory.sh
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build=build-asan
source scripts/sanitizer_build.sh
sanitizer_build "$build" address,undefined distribute_tests gpu_tests training_tests tensor_tests backend_tests
ASAN_OPTIONS=$(asan_options "$build")
export ASAN_OPTIONS
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$repo_root/tests/lsan.supp
run() {  # binary, filter
  echo "== $1 $2"
  "$build/tests/$1" --gtest_filter="$2" --gtest_brief=1
}
run tensor_tests '*'
run backend_tests '*'
run distribute_tests '*'
LOCKSTEP_EMULATED_GPUS=1 run gpu_tests 'Gpu*'
LOCKSTEP_EMULATED_GPUS=2 run gpu_tests 'Gpu*'
run training_tests 'FitInput.*:DistributedInput.*:StepsPerExecution.*:StopSignals.*:Preemption.*:JitCompile.*:StepState.*:Progbar*:Callbacks*:Model*:GradientAccumulation.*:DeferredReads.*:NanThroughActivations.*:SequenceMasks.*:SampleWeight.*:WeightedMetrics.*:MultiHeadAttentionModel.*:Freeze.*:MaskingLayer.*:MaskedSoftmax.*:ConcatenateMask.*:KerasMaskRecords.*:RecurrentModel.*'
echo "sanitize_memory: clean"
