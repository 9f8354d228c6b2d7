#!/usr/bin/env bash
# A small venv for the io reference tests (tests/reference/*io*): tensorboard (its
# EventAccumulator reads our event files) and safetensors (reads our checkpoints), with numpy.
# Far lighter than setup_python.sh (no tensorflow). Idempotent; prints the venv's python as the
# only line on stdout. LOCKSTEP_PY_IO_VENV overrides the location (default: <repo>/.venv-io).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LOCKSTEP_PY_IO_VENV:-$repo_root/.venv-io}"
log() { echo "[setup_python_io] $*" >&2; }

"$repo_root/scripts/make_venv.sh" "$venv" setup_python_io
py="$venv/bin/python"
if "$py" -c 'import tensorboard, safetensors.numpy, numpy' 2>/dev/null; then
  log "python packages present"
else
  # numpy < 2: tensorboard's event reader still uses APIs numpy 2 removed in some releases.
  # One line: scripts/container.sh reads it (LOCKSTEP_PYPI=host stages these wheels for the image).
  PIP_PACKAGES=(tensorboard safetensors "numpy<2")
  log "pip install into $venv: ${PIP_PACKAGES[*]}"
  "$py" -m pip install --disable-pip-version-check --no-input -q "${PIP_PACKAGES[@]}" >&2
fi
"$py" -c 'import tensorboard, safetensors.numpy, numpy' >&2 || { log "error: $venv is incomplete"; exit 1; }
echo "$py"
