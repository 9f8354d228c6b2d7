#!/usr/bin/env bash
# The Python package: a venv at <repo>/.venv-py (LOCKSTEP_PY_PKG_VENV overrides) with nanobind,
# scikit-build-core, numpy and pytest, then `pip install .` of this checkout into it. The build
# folder build-py/ is kept, and ccache (where installed) compiles, so a rebuild is mostly cache
# hits. Idempotent; prints the venv's python as the only line on stdout.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LOCKSTEP_PY_PKG_VENV:-$repo_root/.venv-py}"
log() { echo "[setup_python_pkg] $*" >&2; }

"$repo_root/scripts/make_venv.sh" "$venv" setup_python_pkg
py="$venv/bin/python"
if ! "$py" -c 'import nanobind, scikit_build_core, numpy, pytest' 2>/dev/null; then
  log "pip install into $venv: nanobind scikit-build-core numpy pytest"
  "$py" -m pip install --disable-pip-version-check --no-input -q nanobind scikit-build-core numpy pytest >&2
fi

# The same compiler settings as scripts/build.sh (CUDA where nvcc is, warnings as errors, ccache).
export PATH="/usr/local/cuda/bin:$PATH"
# The compiler as scripts/build.sh's CMake finds it (pip's would be Python's x86_64-linux-gnu-g++):
# the same command lines, so ccache serves the library's objects compiled for build/.
defines=(--config-settings=cmake.define.LOCKSTEP_WERROR=ON
         "--config-settings=cmake.define.CMAKE_CXX_COMPILER=${CXX:-$(command -v c++ || echo g++)}")
if command -v ccache >/dev/null; then
  defines+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache --config-settings=cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
log "pip install $repo_root (build folder $repo_root/build-py)"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$py" -m pip install --disable-pip-version-check --no-input -q \
  --no-build-isolation --config-settings=build-dir="$repo_root/build-py" --config-settings=cmake.args=-GNinja "${defines[@]}" "$repo_root" >&2
"$py" -c 'import lockstep' >&2 || { log "error: import lockstep fails in $venv"; exit 1; }
echo "$py"
