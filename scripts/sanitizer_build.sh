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
