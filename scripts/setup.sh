#!/usr/bin/env bash
# Prepares a Debian 12 machine for lockstep: the apt packages the build and tests need, then
# the datasets in the data directory where lockstep::datasets looks for them
# ($LOCKSTEP_DATA_DIR, else $HOME/.lockstep/datasets).
#
# Idempotent: packages already installed and data already verified are left alone, so it is
# safe to re-run. Runs as root (or through sudo when not root).
#
#   scripts/setup.sh            # packages + data
#   scripts/setup.sh --no-apt   # data only
set -euo pipefail

# Everything apt must provide; add new needs here, in this one list.
APT_PACKAGES=(
  cmake ninja-build g++ ccache  # ccache: the Python package's build (build-py/) reuses build/'s objects
  libdnnl-dev ocl-icd-opencl-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev libhdf5-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist python3-numpy python3-torch
  python3-markdown-it python3-venv python3-dev
  libopenmpi-dev openmpi-bin
  time  # GNU time: tests/cli/cpu_host_rss.sh reads the peak RSS with /usr/bin/time -v
)

# Where MNIST is downloaded from when no local copy exists (the files are gzip IDX); another
# mirror can be given as MNIST_MIRROR=URL in the environment.
MNIST_MIRROR="${MNIST_MIRROR:-https://ossci-datasets.s3.amazonaws.com/mnist}"
# md5 of the uncompressed files, as published with MNIST.
declare -A MNIST_MD5=(
  [train-images-idx3-ubyte]=6bbc9ace898e44ae57da46a324031adb
  [train-labels-idx1-ubyte]=a25bea736e30d166cdddb491f175f624
  [t10k-images-idx3-ubyte]=2646ac647ad5339dbf082846283269ea
  [t10k-labels-idx1-ubyte]=27ae3e4e09519cfbb04c329615203637
)
FASHION_SYSTEM_DIR=/usr/share/datasets/fashion-mnist

say() { printf 'setup.sh: %s\n' "$*"; }
die() { printf 'setup.sh: error: %s\n' "$*" >&2; exit 1; }

with_apt=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) with_apt=0 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (known: --no-apt, --help)" ;;
  esac
done

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${LOCKSTEP_DATA_DIR:-}" ]]; then
  data_dir="$LOCKSTEP_DATA_DIR"
elif [[ -n "${HOME:-}" ]]; then
  data_dir="$HOME/.lockstep/datasets"
else
  die "neither LOCKSTEP_DATA_DIR nor HOME is set; set LOCKSTEP_DATA_DIR to where the datasets should go"
fi

install_apt_packages() {
  local missing=() pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" == installed ]] || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    say "apt: all ${#APT_PACKAGES[@]} packages already installed"
    return
  fi
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "apt: not root and no sudo; install as root: ${missing[*]}"
    sudo=(sudo)
  fi
  say "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
}

# md5 of a file's uncompressed content (it may be gzip or raw).
content_md5() {
  if [[ "$(head -c 2 "$1" | od -An -tx1 | tr -d ' \n')" == 1f8b ]]; then
    gzip -dc "$1" | md5sum | cut -d' ' -f1
  else
    md5sum <"$1" | cut -d' ' -f1
  fi
}

download() {  # url dest
  if command -v curl >/dev/null; then
    curl -fsSL --retry 3 -o "$2" "$1"
  elif command -v python3 >/dev/null; then
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
  else
    die "need curl or python3 to download $1"
  fi
}

setup_mnist() {
  local dest="$data_dir/mnist" shared
  shared="$(dirname "$repo_root")/shared/data/mnist"
  mkdir -p "$dest"
  local name want have file tmp
  for name in "${!MNIST_MD5[@]}"; do
    want="${MNIST_MD5[$name]}"
    for file in "$dest/$name.gz" "$dest/$name"; do
      if [[ -f "$file" && "$(content_md5 "$file")" == "$want" ]]; then
        say "mnist: $file already there, md5 verified"
        continue 2
      fi
    done
    tmp="$dest/.$name.gz.partial"
    rm -f "$tmp"
    if [[ -f "$shared/$name.gz" ]]; then
      say "mnist: copying $shared/$name.gz"
      cp "$shared/$name.gz" "$tmp"
    else
      say "mnist: downloading $MNIST_MIRROR/$name.gz"
      # Without a network, curl's own message named no way out: say where else MNIST can come from.
      download "$MNIST_MIRROR/$name.gz" "$tmp" || {
        rm -f "$tmp"
        die "mnist: downloading $MNIST_MIRROR/$name.gz failed (no network?). Copy the four MNIST files" \
          "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte," \
          "gzipped with .gz or raw) into $dest by hand (\$LOCKSTEP_DATA_DIR/mnist, else ~/.lockstep/datasets/mnist)," \
          "or the .gz files into $shared, and run this again. The Debian package dataset-fashion-mnist holds" \
          "Fashion-MNIST only, not MNIST."
      }
    fi
    have="$(content_md5 "$tmp")"
    if [[ "$have" != "$want" ]]; then
      rm -f "$tmp"
      die "mnist: $name has md5 $have, expected $want; the source is corrupt"
    fi
    chmod 644 "$tmp"  # the shared copy is read-only; ours need not be
    mv -f "$tmp" "$dest/$name.gz"
    rm -f "$dest/$name"  # a stale raw copy would be read first
    say "mnist: $dest/$name.gz in place, md5 verified"
  done
}

setup_fashion_mnist() {
  local dest="$data_dir/fashion_mnist" file
  if [[ ! -d "$FASHION_SYSTEM_DIR" ]]; then
    say "fashion_mnist: $FASHION_SYSTEM_DIR missing (apt package dataset-fashion-mnist); skipped"
    return
  fi
  mkdir -p "$dest"
  for file in "$FASHION_SYSTEM_DIR"/*-ubyte*; do
    if [[ "$(readlink "$dest/$(basename "$file")" || true)" == "$file" ]]; then
      say "fashion_mnist: $dest/$(basename "$file") already links to $file"
    else
      ln -sfn "$file" "$dest/$(basename "$file")"
      say "fashion_mnist: linked $dest/$(basename "$file") -> $file"
    fi
  done
}

if ((with_apt)); then install_apt_packages; else say "apt: skipped (--no-apt)"; fi
say "data directory: $data_dir"
setup_mnist
setup_fashion_mnist
say "done"
