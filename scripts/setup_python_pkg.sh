#!/usr/bin/env bash
# The Python package: a venv at <repo>/.venv-py (LOCKSTEP_PY_PKG_VENV overrides) with nanobind,
# scikit-build-core, numpy, pytest, nbclient and ipykernel (the notebook's test), then
# a wheel of this checkout installed into it. The build folder build-py/ is kept, and ccache (where
# installed) compiles, so a rebuild is mostly cache hits. The venv's Jupyter kernel "lockstep" is
# registered inside the venv (share/jupyter/kernels/), not in the user's home. Idempotent; prints
# the venv's python as the only line on stdout.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LOCKSTEP_PY_PKG_VENV:-$repo_root/.venv-py}"
log() { echo "[setup_python_pkg] $*" >&2; }

"$repo_root/scripts/make_venv.sh" "$venv" setup_python_pkg
py="$venv/bin/python"
# One line: scripts/container.sh reads it (LOCKSTEP_PYPI=host stages these wheels for the image).
PIP_PACKAGES=(nanobind scikit-build-core numpy pytest nbclient ipykernel)
if ! "$py" -c 'import nanobind, scikit_build_core, numpy, pytest, nbclient, ipykernel' 2>/dev/null; then
  log "pip install into $venv: ${PIP_PACKAGES[*]}"
  "$py" -m pip install --disable-pip-version-check --no-input -q "${PIP_PACKAGES[@]}" >&2
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
# A wheel (kept in build-py/dist/: the container's Jupyter image installs it), then that wheel.
log "pip wheel + install $repo_root (build folder $repo_root/build-py)"
rm -rf "$repo_root/build-py/dist"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$py" -m pip wheel --disable-pip-version-check --no-input -q --no-deps \
  --no-build-isolation --config-settings=build-dir="$repo_root/build-py" --config-settings=cmake.args=-GNinja \
  "${defines[@]}" -w "$repo_root/build-py/dist" "$repo_root" >&2
"$py" -m pip install --disable-pip-version-check --no-input -q --no-deps --force-reinstall \
  "$repo_root"/build-py/dist/lockstep-*.whl >&2
"$py" -c 'import lockstep' >&2 || { log "error: import lockstep fails in $venv"; exit 1; }
# The kernel the notebook's test names, so nbclient starts this venv's python whatever the user's
# own Jupyter set-up holds.
"$py" -m ipykernel install --sys-prefix --name lockstep --display-name "Python 3 (lockstep)" >/dev/null 2>&1 \
  || { log "error: ipykernel install --sys-prefix fails in $venv"; exit 1; }
echo "$py"
