#!/usr/bin/env bash
# Creates the venv VENV with Debian's python3 (apt-getting python3-venv first where it is missing,
# as root), unless it exists. Shared by the setup_python_*.sh scripts; TAG prefixes its messages.
#   scripts/make_venv.sh VENV TAG
set -euo pipefail
venv="$1"
log() { echo "[$2] $1" >&2; }
if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then log "error: need root to apt-get install python3-venv" "$2"; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends python3-venv python3-pip python3-dev >&2
fi
if [[ ! -x "$venv/bin/python" ]]; then
  log "creating $venv" "$2"
  /usr/bin/python3 -m venv "$venv" >&2
fi
