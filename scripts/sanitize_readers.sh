#!/usr/bin/env bash
# The readers of files a user may not control (HDF5, zip, .npz/.npy, IDX, CSV, TFRecord,
# checkpoints, .keras loading) and their fuzz tests, built with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ and run. Not part of scripts/test.sh: it builds the
# library a second time (docs/HOSTILE-INPUTS.md says how long it takes).
#   scripts/sanitize_readers.sh [gtest filter]   (default: every reader test)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build=build-asan
source scripts/sanitizer_build.sh  # (CUDA off: the readers have no device code)
sanitizer_build "$build" address,undefined io_tests data_tests training_tests
# Any report fails the run: undefined behaviour halts as an address error does. Leaks inside
# libhdf5's free lists are not ours (tests/lsan.supp). handle_segv=0: the HDF5 reader's forked
# child (src/io/hdf5_child_probe.cpp) that libhdf5 crashes in on a hostile file dies by SIGSEGV as
# it does outside the sanitizer (ASan's own handler would make it exit 1 with a report of
# uninstrumented libhdf5 code); our code's bad accesses are caught by the instrumentation first.
ASAN_OPTIONS=$(asan_options "$build")
export ASAN_OPTIONS
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$repo_root/tests/lsan.supp
filter="${1:-}"
run() {  # binary, default filter
  echo "== $1 ${filter:-$2}"
  "$build/tests/$1" --gtest_filter="${filter:-$2}" --gtest_brief=1
}
run io_tests '*'
run data_tests 'DataNpy*:DataNpz*:NpzDataset*:NpzHostile*:DataIdx*:DataCsv*:DataDatasets*'
# (Not the 30,000-layer chain's time bound: the sanitizers make it 3x slower.)
run training_tests 'KerasFile*:HostileKeras*:*HostileLayerConfig*:BrokenArchive*:DeepGraph*:SavedModel*:-DeepGraph.A30000LayerChainLoadsInLinearTimeInEitherOrder'
echo "sanitize_readers: clean"
