#!/usr/bin/env bash
# The one place the reference tests find the TF/Keras venv (scripts/setup_python.sh makes it):
# $LOCKSTEP_PY_VENV when set (as setup_python.sh honours it), else <repo>/.venv-ref, read when the
# test runs (LOCKSTEP_PY_VENV=/path ctest -R reference works without reconfiguring).
#   tests/reference/ref_python.sh SCRIPT.py [ARGS...]   runs SCRIPT.py with the venv's python
#   tests/reference/ref_python.sh --path                prints the venv's python
# Where the venv has no python: exit 77 (ctest's SKIP here) saying where it looked.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ -n "${LOCKSTEP_PY_VENV:-}" ]]; then
  venv="$LOCKSTEP_PY_VENV" from="from LOCKSTEP_PY_VENV"
else
  venv="$repo/.venv-ref" from="the default; set LOCKSTEP_PY_VENV to use another venv"
fi
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
  echo "SKIP: no TF/Keras reference venv: $py ($from) is not an executable; scripts/setup_python.sh makes one" >&2
  exit 77
fi
if [[ "${1:-}" == --path ]]; then
  echo "$py"
  exit 0
fi
exec "$py" "$@"
