# shellcheck shell=bash
# Sourced by every bench script (after setting repo, the checkout): what they share, each in one
# place. Errors start with the script's name (bench/NAME.sh prints "NAME: ...").

# positive_ints VALUE...: exits 2 naming the first VALUE that is not a positive integer.
positive_ints() {
  local v
  for v in "$@"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "$(basename "$0" .sh): '$v' is not a positive integer" >&2; exit 2; }
  done
}

# bench_bin VAR ENV NAME: sets VAR to $ENV when that is set, else to $repo/build/bin/NAME; when no
# executable is there, exits 1 naming it, the target that builds it and ENV, which points elsewhere.
bench_bin() {
  local path="${!2:-$repo/build/bin/$3}" target="$3"
  [[ "$3" == lockstep ]] && target=lockstep_cli
  if [[ ! -x "$path" ]]; then
    echo "$(basename "$0" .sh): error: $3 not found at $path; build it first (scripts/build.sh, or" \
      "cmake --build build --target $target), or point $2 at one" >&2
    exit 1
  fi
  printf -v "$1" '%s' "$path"
}

# reference_python REPO: the Python to run the references (TF, PyTorch) with: $REF_PYTHON when
# set, else REPO's .venv-ref (scripts/setup_python.sh), else /usr/bin/python3.
reference_python() {
  if [[ -n "${REF_PYTHON:-}" ]]; then echo "$REF_PYTHON"
  elif [[ -x "$1/.venv-ref/bin/python" ]]; then echo "$1/.venv-ref/bin/python"
  else echo /usr/bin/python3; fi
}

# limit_library_threads THREADS: the thread count of the OpenMP and BLAS libraries (OpenMP,
# OpenBLAS, MKL), exported for every process the script starts after: the references' threads.
limit_library_threads() {
  export OMP_NUM_THREADS="$1" OPENBLAS_NUM_THREADS="$1" MKL_NUM_THREADS="$1"
}

# reference_package PACKAGE WHAT [--install]: a Debian package a reference needs (benchmarks only;
# the tests never do). With --install, as root, installs it where missing; otherwise warns that
# WHAT, naming the consequence.
reference_package() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" && return 0
  if [[ "${3:-}" == --install && $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$1" >&2
  else
    echo "$(basename "$0" .sh): warning: $1 is not installed; $2" >&2
  fi
}

# openblas_check [--install]: Debian's torch uses whatever libblas.so.3 points at, the slow
# reference BLAS unless OpenBLAS (libopenblas0-pthread) is installed.
openblas_check() { reference_package libopenblas0-pthread "torch's figures use the reference BLAS" "$@"; }

# libtorch_check [--install]: the libtorch reference (bench/reference_libtorch.cpp, the C++ user's
# alternative) needs Debian's libtorch-dev.
libtorch_check() { reference_package libtorch-dev "no libtorch (C++) reference" "$@"; }
