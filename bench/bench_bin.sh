# Sourced by the bench scripts that run lockstep's binaries (after setting repo, the checkout).
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
