#!/usr/bin/env bash
# Configures and builds lockstep into build/ (Release, warnings as errors).
#   scripts/build.sh [extra cmake -D options]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
export PATH="/usr/local/cuda/bin:$PATH"
launcher=()  # ccache, where installed, makes rebuilds and other checkouts cheap
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_WERROR=ON "${launcher[@]}" "$@"
cmake --build build -j"$(nproc)"
