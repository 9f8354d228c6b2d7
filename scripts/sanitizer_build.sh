# Sourced by scripts/sanitize_*.sh. sanitizer_build DIR SANITIZERS TARGET...: configures DIR
# (RelWithDebInfo, LOCKSTEP_SANITIZE=SANITIZERS, ccache where installed) and builds only TARGETs.
# CUDA off: the sanitizers instrument host code only.
sanitizer_build() {
  local build="$1" sanitize="$2"
  shift 2
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCKSTEP_SANITIZE="$sanitize" \
    -DLOCKSTEP_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "$@"
}

# asan_options DIR: the ASAN_OPTIONS both scripts run with. Stack use after return is detected
# (ASan's fake stack) except where DIR's code is compiled for AVX-512: GCC 12's libasan places fake
# frames 32-byte aligned, and AVX-512 code gives locals 64-byte alignment and reads them with
# aligned 64-byte loads, so an instrumented test dies by SIGSEGV in its own frame (it did, in
# tests/common/nan_activation_cases.hpp's table, on an AVX-512 EPYC). LLVM fixed its runtime in
# llvm-project#152819 (2025); Debian 12's GCC has no fix. Heap and stack bounds are still checked.
asan_options() {
  local uar=1
  if grep -q '^LOCKSTEP_NATIVE:BOOL=ON' "$1/CMakeCache.txt" &&
     "${CXX:-g++}" -march=native -dM -E - </dev/null | grep -q '__AVX512F__'; then
    uar=0
    echo "asan_options: AVX-512 build, so stack use after return is not detected (see scripts/sanitizer_build.sh)" >&2
  fi
  # allocator_may_return_null: a size past memory (a hostile file's 2^40 pixels) fails as outside
  # the sanitizer, aligned_alloc returning null and the allocator raising ResourceError, rather
  # than ASan aborting the test at the request.
  echo "detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=$uar:handle_segv=0:allocator_may_return_null=1"
}
