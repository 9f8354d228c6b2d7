#!/usr/bin/env bash
# README command 1: set up a fresh machine, build, and run `lockstep train` (the flagship MLP
# on MNIST). Extra arguments go to `lockstep train`.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo_root/scripts/setup.sh"
"$repo_root/scripts/build.sh" >/dev/null
exec "$repo_root/build/bin/lockstep" train "$@"
