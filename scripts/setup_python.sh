#!/usr/bin/env bash
# Sets up the Python reference environment used by tests/reference and bench/.
#
# - apt: python3-torch, python3-numpy, python3-venv (installed only if missing).
# - .venv-ref at the repo root, made from /usr/bin/python3 with
#   --system-site-packages so the apt torch and numpy are visible inside it.
# - pip installs tensorflow-cpu, tensorboard, safetensors into it, only if missing.
#
# Idempotent: a second run installs nothing and takes seconds. Prints the venv's
# python path as the only line on stdout (all logging goes to stderr), so callers
# can do:  PY=$(scripts/setup_python.sh)
# LOCKSTEP_PY_VENV overrides the venv location.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LOCKSTEP_PY_VENV:-$repo_root/.venv-ref}"
sys_py=/usr/bin/python3

log() { echo "[setup_python] $*" >&2; }

# ---- apt packages -----------------------------------------------------------
missing=()
for pkg in python3 python3-venv python3-pip python3-torch python3-numpy; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  log "apt-get install: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    log "error: need root to apt-get install ${missing[*]}"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
else
  log "apt packages present"
fi

# ---- virtualenv -------------------------------------------------------------
if [[ ! -x "$venv/bin/python" ]]; then
  log "creating $venv (from $sys_py, --system-site-packages)"
  "$sys_py" -m venv --system-site-packages "$venv" >&2
fi
py="$venv/bin/python"

# Debian's torch 1.13 is built against numpy 1.x and fails with "Numpy is not
# available" under numpy 2, which tensorflow-cpu would otherwise pull into the
# venv (through ml_dtypes >= 0.6). TensorFlow >= 2.17 also runs on numpy >= 1.26,
# so pin numpy < 2 in the venv and both frameworks work in one interpreter.
pins=("numpy>=1.26,<2" "ml_dtypes<0.6")

# pip distribution name -> module it provides.
declare -A module_of=(
  [tensorflow-cpu]=tensorflow
  [tensorboard]=tensorboard
  [safetensors]=safetensors
)
to_install=()
for dist in tensorflow-cpu tensorboard safetensors; do
  # find_spec does not import the (slow to import) module.
  if ! "$py" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('${module_of[$dist]}') is None)" 2>/dev/null; then
    to_install+=("$dist")
  fi
done
numpy_ok=0
if "$py" -c "import sys, numpy; v = tuple(int(p) for p in numpy.__version__.split('.')[:2]); sys.exit(0 if (1, 26) <= v < (2, 0) else 1)" 2>/dev/null; then
  numpy_ok=1
fi
if ((${#to_install[@]})) || ((numpy_ok == 0)); then
  log "pip install into $venv: ${to_install[*]} ${pins[*]} (tensorflow-cpu is ~600 MB; this takes a while)"
  # No `pip install --upgrade pip`: the Debian pip inside the venv is new enough
  # for manylinux wheels.
  "$py" -m pip install --disable-pip-version-check --no-input -q "${to_install[@]}" "${pins[@]}" >&2
else
  log "python packages present"
fi

# ---- sanity -----------------------------------------------------------------
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" -c '
import importlib.util, sys
bad = 0
for m in ("numpy", "torch", "tensorflow", "safetensors", "tensorboard"):
    ok = importlib.util.find_spec(m) is not None
    bad += not ok
    print("  %-12s %s" % (m, "ok" if ok else "MISSING"))
import numpy, torch
torch.from_numpy(numpy.zeros(1, dtype=numpy.float32))  # fails if numpy/torch ABIs mismatch
print(f"  numpy {numpy.__version__} + torch {torch.__version__}: interop ok")
sys.exit(1 if bad else 0)
' >&2 || { log "error: the venv at $venv is incomplete (see above)"; exit 1; }

echo "$py"
