#!/usr/bin/env bash
# setup_offline.sh REPO : scripts/setup.sh on a machine without a network (the mirror refuses the
# connection) and no shared copy of MNIST fails with a message that says where else MNIST can
# come from ($LOCKSTEP_DATA_DIR/mnist, or the .gz files in ../shared/data/mnist), not curl's alone.
set -uo pipefail
repo="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A copy of the script in a tree of its own, so that no ../shared/data/mnist is found next to it.
mkdir -p "$work/repo/scripts"
cp "$repo/scripts/setup.sh" "$work/repo/scripts/setup.sh"
MNIST_MIRROR="http://127.0.0.1:9/mnist" LOCKSTEP_DATA_DIR="$work/data" timeout 60 "$here/expect.sh" 1 \
  "downloading http://127.0.0.1:9/mnist/.* failed \(no network\?\).*LOCKSTEP_DATA_DIR/mnist.*$work/shared/data/mnist" \
  bash "$work/repo/scripts/setup.sh" --no-apt || exit 1
[[ -z "$(find "$work/data" -name '*.partial')" ]] || { echo "FAIL: a partial download was left behind"; exit 1; }
