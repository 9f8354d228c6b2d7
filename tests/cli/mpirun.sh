#!/usr/bin/env bash
# mpirun.sh NP [MPIRUN_ARGS...] -- CMD... : runs CMD on NP local ranks with Open MPI's mpirun,
# as root too (CI containers) and with more ranks than cores (--oversubscribe).
set -euo pipefail
np="$1"; shift
args=()
while [[ $# -gt 0 && "$1" != "--" ]]; do args+=("$1"); shift; done
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "$np" --oversubscribe "${args[@]}" "$@"
