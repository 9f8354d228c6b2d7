#!/usr/bin/env bash
# Builds and tests lockstep's container image (docker/Containerfile) with podman or docker.
#
#   scripts/container.sh base    # make the Debian 12 base image locally (debootstrap) if missing
#   scripts/container.sh build   # base if needed, then the runtime image (lockstep:latest)
#   scripts/container.sh jupyter # build, plus the Jupyter image (lockstep-jupyter:latest: the
#                                # Python package and JupyterLab on port 8888)
#   scripts/container.sh test    # build and jupyter, plus the test stage (the README's ctest and
#                                # pytest suites, the notebook executed headless), a find_package
#                                # consumer and a short `lockstep train`; prints them
#   scripts/container.sh size    # the runtime image's size; fails if it holds a compiler or
#                                # a build tree
#
# Environment:
#   LOCKSTEP_CONTAINER_ENGINE  podman or docker (default: podman if installed, else docker)
#   LOCKSTEP_BASE_IMAGE        base image (default: debian:12 if present or pullable, else the
#                              local debootstrap image localhost/lockstep-base:bookworm)
#   LOCKSTEP_CONTAINER_CCACHE  a host ccache directory mounted at /ccache during the build
#                              (podman only; docker builds compile from scratch)
#   LOCKSTEP_PYPI              1 (default): pip inside the build reaches PyPI; host: this
#                              machine's pip downloads the wheels the build needs into the build
#                              context and the build installs only from them (where pip inside
#                              the build cannot reach PyPI); 0: no PyPI: no Python package, pytest
#                              suite or Jupyter image, and the io tests that need PyPI report SKIP
#   CTEST_ARGS                 extra ctest arguments for the test stage, e.g. "-E ^flagship"
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

IMAGE=localhost/lockstep:latest
JUPYTER_IMAGE=localhost/lockstep-jupyter:latest
CHECK_IMAGE=localhost/lockstep-check:latest
LOCAL_BASE=localhost/lockstep-base:bookworm
CONTAINERFILE=docker/Containerfile

say() { printf 'container.sh: %s\n' "$*"; }
die() { printf 'container.sh: error: %s\n' "$*" >&2; exit 1; }

engine="${LOCKSTEP_CONTAINER_ENGINE:-}"
if [[ -z "$engine" ]]; then
  if command -v podman >/dev/null; then engine=podman
  elif command -v docker >/dev/null; then engine=docker
  else die "neither podman nor docker is installed (Debian: apt-get install podman)"; fi
fi
[[ "$engine" == podman || "$engine" == docker ]] || die "LOCKSTEP_CONTAINER_ENGINE must be podman or docker, got '$engine'"
command -v "$engine" >/dev/null || die "$engine is not installed"

# The Debian mirror apt already uses (deb822 .sources or one-line sources.list), so the base
# image comes from where this machine's packages come from. Prints "MIRROR SECURITY_MIRROR".
apt_mirrors() {
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  local uris
  uris="$(cat "${files[@]}" 2>/dev/null \
    | sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]\+\).*/\2/p' \
    | tr ' ' '\n')"
  local main sec
  main="$(grep -E '/debian/?$' <<<"$uris" | head -n 1 || true)"
  sec="$(grep -E '/debian-security/?$' <<<"$uris" | head -n 1 || true)"
  [[ -n "$main" ]] || die "no Debian mirror (a URI ending in /debian) in /etc/apt/sources.list*"
  echo "${main%/} ${sec%/}"
}

make_local_base() {
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  ((EUID == 0)) || die "making the base image needs root (debootstrap)"
  local main sec tmp
  read -r main sec <<<"$(apt_mirrors)"
  tmp="$(mktemp -d)"
  say "base: debootstrap --variant=minbase bookworm from $main"
  debootstrap --variant=minbase bookworm "$tmp/rootfs" "$main" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  {
    echo "deb $main bookworm main"
    echo "deb $main bookworm-updates main"
    [[ -z "$sec" ]] || echo "deb $sec bookworm-security main"
  } >"$tmp/rootfs/etc/apt/sources.list"
  # What debian:12 leaves out too: downloaded .debs and package lists.
  rm -rf "$tmp"/rootfs/var/cache/apt/archives/*.deb "$tmp"/rootfs/var/cache/apt/*.bin \
    "$tmp"/rootfs/var/lib/apt/lists/*
  tar -C "$tmp/rootfs" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$LOCAL_BASE" >/dev/null
  rm -rf "$tmp"
  say "base: $LOCAL_BASE imported"
}

image_exists() {
  if [[ "$engine" == podman ]]; then podman image exists "$1"
  else docker image inspect "$1" >/dev/null 2>&1; fi
}

base_image() {  # prints the base image to build FROM, making the local one if needed
  if [[ -n "${LOCKSTEP_BASE_IMAGE:-}" ]]; then echo "$LOCKSTEP_BASE_IMAGE"; return; fi
  if image_exists debian:12 || image_exists docker.io/library/debian:12; then echo debian:12; return; fi
  if timeout 60 "$engine" pull -q docker.io/library/debian:12 >/dev/null 2>&1; then echo debian:12; return; fi
  image_exists "$LOCAL_BASE" || make_local_base >&2
  echo "$LOCAL_BASE"
}

# MNIST for the build: the project's shared copy when there is one (setup.sh would copy it too,
# but it lives outside the build context); otherwise the build downloads it.
stage_data() {
  rm -rf .container-data
  local shared
  shared="$(dirname "$repo_root")/shared/data/mnist"
  if compgen -G "$shared/*.gz" >/dev/null; then
    mkdir -p .container-data/mnist
    cp "$shared"/*.gz .container-data/mnist/
  fi
}

# LOCKSTEP_PYPI=host: the wheels of scripts/setup_python_pkg.sh's and setup_python_io.sh's
# PIP_PACKAGES lines and of JupyterLab, as binary wheels for the image's Python (Debian 12's
# 3.11.2: this machine's may be a later 3.11, which some wheels require).
stage_wheels() {
  local source packages
  for source in scripts/setup_python_pkg.sh scripts/setup_python_io.sh jupyterlab; do
    if [[ -f "$source" ]]; then
      packages="$(sed -n 's/^ *PIP_PACKAGES=(\(.*\))$/\1/p' "$source" | tr -d '"')"
      [[ -n "$packages" ]] || die "no PIP_PACKAGES=(...) line in $source"
    else packages="$source"; fi
    say "wheels for the build: $packages"
    # shellcheck disable=SC2086  # a list of requirement specifiers
    python3 -m pip download -q --disable-pip-version-check --python-version 3.11.2 --only-binary=:all: \
      -d .container-data/wheels $packages >/dev/null \
      || die "pip download $packages failed"
  done
}

build_target() {  # target tag
  local base version commit pypi="${LOCKSTEP_PYPI:-1}"
  [[ "$pypi" == 0 || "$pypi" == 1 || "$pypi" == host ]] || die "LOCKSTEP_PYPI must be 0, 1 or host, got '$pypi'"
  base="$(base_image)"
  version="$(sed -n 's/^project(lockstep VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
  commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  [[ -z "$(git status --porcelain 2>/dev/null)" ]] || commit="$commit-dirty"
  trap 'rm -rf "$repo_root/.container-data"' EXIT
  stage_data
  if [[ "$pypi" == host ]]; then stage_wheels; pypi=1; fi  # the build sees staged wheels, and PyPI=1
  local args=(build -f "$CONTAINERFILE" --target "$1" -t "$2"
              --build-arg "BASE_IMAGE=$base" --build-arg "LOCKSTEP_VERSION=$version"
              --build-arg "LOCKSTEP_COMMIT=$commit"
              --build-arg "LOCKSTEP_PYPI=$pypi" --build-arg "CTEST_ARGS=${CTEST_ARGS:-}")
  if [[ "$engine" == podman ]]; then
    # chroot isolation: RUN steps work where the OCI runtimes cannot start containers.
    args+=(--isolation "${LOCKSTEP_PODMAN_ISOLATION:-chroot}" --layers)
    if [[ -n "${LOCKSTEP_CONTAINER_CCACHE:-}" ]]; then
      mkdir -p "$LOCKSTEP_CONTAINER_CCACHE"
      args+=(--volume "$(cd "$LOCKSTEP_CONTAINER_CCACHE" && pwd):/ccache")
    fi
  fi
  say "$engine build --target $1 (base $base, lockstep $version, commit $commit)"
  local start=$SECONDS
  "$engine" "${args[@]}" .
  say "target $1 built as $2 in $((SECONDS - start)) s"
}

# Runs a command on the image's files without starting it (create + export/cp work where
# running containers does not).
with_container() {  # image command... ; the command gets the container id as $1
  local id
  id="$("$engine" create "$1")"
  shift
  local rc=0
  "$@" "$id" || rc=$?
  "$engine" rm "$id" >/dev/null
  return "$rc"
}

show_results() {
  local out
  out="$(mktemp -d)"
  "$engine" cp "$1:/results/." "$out"
  say "test stage (ctest, full log in the image's /results/ctest.log):"
  grep -E 'tests passed|tests failed|Total Test time|\*\*\*Skipped' "$out/ctest.log" | sed 's/^/  /'
  say "find_package consumer in the runtime image:"
  sed 's/^/  /' "$out/consumer.log"
  say "lockstep train in the runtime image:"
  tail -n 3 "$out/train.log" | sed 's/^/  /'
  say "test stage (pytest: the Python package and the notebook; /results/pytest.log):"
  tail -n 1 "$out/pytest.log" | sed 's/^/  /'
  rm -rf "$out"
}

report_size() {
  local bytes files
  if [[ "$engine" == podman ]]; then bytes="$(podman image inspect --format '{{.Size}}' "$IMAGE")"
  else bytes="$(docker image inspect --format '{{.Size}}' "$IMAGE")"; fi
  say "$IMAGE: $((bytes / 1000000)) MB uncompressed ($bytes bytes)"
  files="$(with_container "$IMAGE" sh -c '"$0" export "$1" | tar -t' "$engine")"
  local bad
  bad="$(grep -E '^(\./)?usr/(local/)?bin/(cc|c\+\+|gcc|g\+\+|clang|clang\+\+|x86_64-linux-gnu-g(cc|\+\+)(-[0-9]+)?|cmake|ninja)$|^(\./)?src/lockstep/|/CMakeCache\.txt$' <<<"$files" || true)"
  [[ -z "$bad" ]] || die "the runtime image holds build tools or a build tree: $(tr '\n' ' ' <<<"$bad")"
  say "no compiler, cmake, ninja or build tree in the runtime image"
}

case "${1:-}" in
  base) image_exists "$LOCAL_BASE" && say "base: $LOCAL_BASE already there" || make_local_base ;;
  build) build_target runtime "$IMAGE"; report_size ;;
  jupyter)
    build_target jupyter "$JUPYTER_IMAGE"
    say "run it: $engine run -p 8888:8888 $JUPYTER_IMAGE (then open the URL it prints)"
    ;;
  test)
    build_target runtime "$IMAGE"
    [[ "${LOCKSTEP_PYPI:-1}" == 0 ]] || build_target jupyter "$JUPYTER_IMAGE"
    build_target check "$CHECK_IMAGE"
    with_container "$CHECK_IMAGE" show_results
    report_size
    ;;
  size) image_exists "$IMAGE" || die "$IMAGE not built yet: scripts/container.sh build"; report_size ;;
  -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown or missing subcommand '${1:-}' (known: base, build, jupyter, test, size, --help)" ;;
esac
