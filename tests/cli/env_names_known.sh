#!/usr/bin/env bash
# Every LOCKSTEP_* environment variable the project's scripts read or set is one lockstep knows
# (`lockstep env`): lockstep refuses any other LOCKSTEP_* variable in its environment, so a
# variable a script documents but the registry (src/core/env.cpp) lacks makes every lockstep run
# under it fail ("unknown environment variable"). CMake variables are not environment variables
# and are not read here.
#   tests/cli/env_names_known.sh LOCKSTEP_BIN REPO
set -euo pipefail
bin="$1" repo="$2"
known="$("$bin" env | grep -oE '^LOCKSTEP_[A-Z0-9_]+' | sort -u)"
[[ -n "$known" ]] || { echo "env_names_known: '$bin env' listed no variable" >&2; exit 1; }
# Shell: $LOCKSTEP_X / ${LOCKSTEP_X...} / LOCKSTEP_X=...; Python: environ["LOCKSTEP_X"], getenv("LOCKSTEP_X").
# Comment lines are left out (they may name CMake's -DLOCKSTEP_... options in prose).
used="$(cd "$repo" && {
  grep -rhE --include='*.sh' 'LOCKSTEP_' scripts bench tests examples .ci
  grep -hE 'LOCKSTEP_' .ci/run || true
} | grep -vE '^[[:space:]]*#' | grep -oE '\$\{?LOCKSTEP_[A-Z0-9_]+|(^|[[:space:]])LOCKSTEP_[A-Z0-9_]+=' |
  grep -oE 'LOCKSTEP_[A-Z0-9_]+' | sort -u)"
used="$(cd "$repo" && {
  echo "$used"
  grep -rhE --include='*.py' 'LOCKSTEP_' python bench tests examples scripts | grep -vE '^[[:space:]]*#' |
    grep -oE '(environ(\.get)?[[(]|getenv\()"LOCKSTEP_[A-Z0-9_]+' | grep -oE 'LOCKSTEP_[A-Z0-9_]+' || true
} | sort -u)"
[[ -n "$used" ]] || { echo "env_names_known: found no LOCKSTEP_* variable in the scripts (pattern broken?)" >&2; exit 1; }
unknown="$(comm -23 <(echo "$used") <(echo "$known"))"
if [[ -n "$unknown" ]]; then
  echo "env_names_known: scripts use LOCKSTEP_* variables that lockstep does not know (add them to src/core/env.cpp):" >&2
  echo "$unknown" >&2
  exit 1
fi
echo "env_names_known: $(wc -l <<<"$used") variables used by scripts, all known"
