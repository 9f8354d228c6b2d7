#!/usr/bin/env bash
# Measures lockstep's flagship training throughputs of two builds side by side, in one run:
# a baseline commit and the current working tree (or a second commit), to check that a change
# did not make training slower.
#
#   bench/compare_commits.sh [--base REF] [--head | --head-ref REF] [-n STEPS] [-r ROUNDS]
#                            [--tolerance T] [--head-build DIR] [--base-build DIR] [-j JOBS] [-h]
#     --base REF        baseline commit (default 479a28f); built in a git worktree in a temp dir
#     --head            measure the working tree of this checkout (the default)
#     --head-ref REF    measure commit REF (also in a temp worktree) instead of the working tree
#     -n STEPS          timed training steps per measurement (default 6000: ~2-4 s on 2 cores)
#     -r ROUNDS         rounds; each round measures base then head, per figure (default 5)
#     --tolerance T     PASS when head >= (1 - T) x base (default 0.03)
#     --head-build DIR  build dir for the working tree (default build-compare/head, kept between
#                       runs so that a rerun only recompiles what changed; build/ is never touched)
#     --base-build DIR  keep the baseline's worktree (DIR/src) and build (DIR/build) between runs,
#                       so the baseline can be built beforehand, e.g. while the machine is busy
#                       (default: a temporary worktree and build, removed at exit)
#     -j JOBS           parallel build jobs (default: nproc); builds run under nice -n 10
#   env: LOCKSTEP_DATA_DIR etc. are passed to both builds alike (MNIST must be there).
#
# Both builds: cmake -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_WERROR=ON (as
# scripts/build.sh) with tests, examples and bench off, plus one driver program that this
# script writes and injects into each build (CMAKE_PROJECT_lockstep_INCLUDE), so the very same
# code measures both. The driver is strategy_overhead's bare Model::train_step loop (public API
# that both builds have): MNIST batches, 5% warm-up steps (at least 20), then STEPS timed steps:
#   1 device:    MirroredStrategy on 1 logical CPU device, batch 64   (lockstep train --devices cpu:1)
#   2 replicas:  MirroredStrategy on 2 logical CPU devices, global batch 128 (64 per replica)
# of Dense(128, relu, input 784) -> Dropout(0.2) -> Dense(10, softmax), Adam(1e-3), sparse
# categorical cross-entropy. Each measurement is its own process; the table shows the median
# per build and figure, head/base, and PASS/FAIL. Exit 0 when every build and measurement ran
# (FAIL included), 1 on a build or measurement error, 2 on bad usage.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,32p' "$0" >&2; exit 2; }
die() { echo "compare_commits: error: $*" >&2; exit 1; }
base_ref=479a28f
head_ref=""
steps=6000
rounds=5
tolerance=0.03
head_build="$repo/build-compare/head"
base_keep=""
jobs="$(nproc)"
while (($#)); do
  case "$1" in
    --base) [[ $# -ge 2 ]] || usage; base_ref="$2"; shift 2 ;;
    --head-ref) [[ $# -ge 2 ]] || usage; head_ref="$2"; shift 2 ;;
    --head) head_ref=""; shift ;;  # the default: the working tree
    -n) [[ $# -ge 2 ]] || usage; steps="$2"; shift 2 ;;
    -r) [[ $# -ge 2 ]] || usage; rounds="$2"; shift 2 ;;
    --tolerance) [[ $# -ge 2 ]] || usage; tolerance="$2"; shift 2 ;;
    --head-build) [[ $# -ge 2 ]] || usage; head_build="$2"; shift 2 ;;
    --base-build) [[ $# -ge 2 ]] || usage; base_keep="$2"; shift 2 ;;
    -j) [[ $# -ge 2 ]] || usage; jobs="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "compare_commits: unknown argument '$1'" >&2; usage ;;
  esac
done
positive_ints "$steps" "$rounds" "$jobs"
[[ "$tolerance" =~ ^(0|0?\.[0-9]+)$ ]] || { echo "compare_commits: --tolerance must be in [0, 1), got '$tolerance'" >&2; exit 2; }

resolve() {  # REF -> full commit hash, or exit 2
  git -C "$repo" rev-parse --verify --quiet "$1^{commit}" ||
    { echo "compare_commits: '$1' is not a commit of $repo" >&2; exit 2; }
}
base_commit="$(resolve "$base_ref")"
base_label="$(git -C "$repo" rev-parse --short "$base_commit")"
if [[ -n "$head_ref" ]]; then
  head_commit="$(resolve "$head_ref")"
  head_label="$(git -C "$repo" rev-parse --short "$head_commit")"
else
  head_label="$(git -C "$repo" rev-parse --short HEAD) + working tree"
  [[ -z "$(git -C "$repo" status --porcelain --untracked-files=normal)" ]] || head_label+=" (modified)"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/compare_commits.XXXXXX")"
worktrees=()
cleanup() {
  local wt
  for wt in "${worktrees[@]}"; do git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The driver, and the CMake snippet that adds it at the end of lockstep's top-level
# CMakeLists.txt (deferred, so lockstep's targets and CMAKE_CXX_STANDARD exist by then).
write_driver() {  # DIR: writes DIR/driver.cpp and DIR/driver.cmake (unchanged files keep their mtime)
  local dir="$1"
  mkdir -p "$dir"
  cat >"$dir/driver.cpp.new" <<'CPPEOF'
// Written by bench/compare_commits.sh: the flagship MLP's training steps per second through
// Model::train_step under MirroredStrategy over REPLICAS logical CPU devices (the loop of
// bench/strategy_overhead.cpp). Prints "steps_per_second X".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <lockstep/lockstep.hpp>

using namespace lockstep;

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s REPLICAS GLOBAL_BATCH STEPS\n", argv[0]);
    return 2;
  }
  const int replicas = std::atoi(argv[1]);
  const std::int64_t batch = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  if (replicas < 1 || batch < replicas || batch > 12800 || steps < 1) {
    std::fprintf(stderr, "compare_commits_driver: bad arguments\n");
    return 2;
  }
  auto [train, test] = datasets::mnist::load_data();
  const std::int64_t n = 12800 / batch * batch;
  const Tensor x = flatten_and_scale_images(train.x.slice(0, n));
  const Tensor y = train.y.slice(0, n);
  distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
  if (strategy.num_replicas_in_sync() != replicas) {
    std::fprintf(stderr, "compare_commits_driver: got %d replicas, asked for %d\n", strategy.num_replicas_in_sync(),
                 replicas);
    return 1;
  }
  set_random_seed(1);
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
    model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  }
  const std::int64_t batches = n / batch;
  std::int64_t next = 0;
  auto step = [&] {
    const std::int64_t b = (next++ % batches) * batch;
    model->train_step(x.slice(b, b + batch), y.slice(b, b + batch));
  };
  const int warmup = std::max(20, steps / 20);
  for (int i = 0; i < warmup; ++i) step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("steps_per_second %.3f\n", steps / s);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "compare_commits_driver: %s\n", e.what());
  return 1;
}
CPPEOF
  cat >"$dir/driver.cmake.new" <<'CMAKEEOF'
# Written by bench/compare_commits.sh; included right after project(lockstep).
set(_lockstep_compare_driver_dir "${CMAKE_CURRENT_LIST_DIR}")
function(_lockstep_add_compare_driver)
  add_executable(compare_commits_driver "${_lockstep_compare_driver_dir}/driver.cpp")
  set_target_properties(compare_commits_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin")
  target_link_libraries(compare_commits_driver PRIVATE lockstep::lockstep lockstep_warnings)
endfunction()
cmake_language(DEFER CALL _lockstep_add_compare_driver)
CMAKEEOF
  local f
  for f in driver.cpp driver.cmake; do
    if cmp -s "$dir/$f.new" "$dir/$f"; then rm -f "$dir/$f.new"; else mv -f "$dir/$f.new" "$dir/$f"; fi
  done
}

build() {  # NAME SOURCE_DIR BUILD_DIR: configures and builds the driver; prints its path
  local name="$1" src="$2" bdir="$3"
  mkdir -p "$bdir"
  write_driver "$bdir/compare_commits_driver"
  echo "== building $name: $src -> $bdir (log: $bdir/compare_commits_build.log)" >&2
  if ! (export PATH="/usr/local/cuda/bin:$PATH"
        nice -n 10 cmake -S "$src" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_WERROR=ON \
          -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=OFF \
          -DCMAKE_PROJECT_lockstep_INCLUDE="$bdir/compare_commits_driver/driver.cmake" &&
        nice -n 10 cmake --build "$bdir" -j"$jobs" --target compare_commits_driver) \
        >"$bdir/compare_commits_build.log" 2>&1; then
    echo "compare_commits: building $name failed; the end of its log:" >&2
    tail -n 30 "$bdir/compare_commits_build.log" >&2
    exit 1
  fi
  [[ -x "$bdir/bin/compare_commits_driver" ]] || die "$name: no driver at $bdir/bin/compare_commits_driver after the build"
  echo "$bdir/bin/compare_commits_driver"
}

add_worktree() {  # PATH COMMIT: a detached worktree of COMMIT at PATH (removed at exit)
  worktrees+=("$1")
  git -C "$repo" worktree add --detach --quiet "$1" "$2" >&2 || die "git worktree add $1 $2 failed"
}

if [[ -n "$base_keep" ]]; then
  mkdir -p "$base_keep"
  base_keep="$(cd "$base_keep" && pwd)"
  if [[ -d "$base_keep/src" ]]; then
    git -C "$base_keep/src" checkout --detach --quiet "$base_commit" >&2 || die "cannot check out $base_commit in $base_keep/src"
  else
    git -C "$repo" worktree add --detach --quiet "$base_keep/src" "$base_commit" >&2 || die "git worktree add $base_keep/src failed"
  fi
  base_bin="$(build "base $base_label" "$base_keep/src" "$base_keep/build")"
else
  add_worktree "$tmp/base-src" "$base_commit"
  base_bin="$(build "base $base_label" "$tmp/base-src" "$tmp/base-build")"
fi
if [[ -n "$head_ref" ]]; then
  add_worktree "$tmp/head-src" "$head_commit"
  head_bin="$(build "head $head_label" "$tmp/head-src" "$tmp/head-build")"
else
  head_bin="$(build "head $head_label" "$repo" "$head_build")"
fi

# figure name|replicas|global batch
figures=("1 device, batch 64|1|64" "2 replicas, global batch 128|2|128")
declare -A samples=()
measure() {  # BIN REPLICAS BATCH -> steps/s
  local out rc=0
  out="$("$1" "$2" "$3" "$steps" 2>"$tmp/measure.err")" || rc=$?
  if [[ $rc -ne 0 || ! "$out" =~ steps_per_second\ ([0-9.]+) ]]; then
    echo "compare_commits: measurement failed: $1 $2 $3 $steps (exit $rc); its output:" >&2
    echo "$out" >&2
    tail -n 20 "$tmp/measure.err" >&2
    exit 1
  fi
  echo "${BASH_REMATCH[1]}"
}
for ((r = 1; r <= rounds; r++)); do
  for i in "${!figures[@]}"; do
    IFS='|' read -r fname nrep gbs <<<"${figures[$i]}"
    for side in base head; do
      if [[ $side == base ]]; then bin="$base_bin"; else bin="$head_bin"; fi
      sps="$(measure "$bin" "$nrep" "$gbs")"
      samples[$side,$i]+="$sps "
      printf 'round %d/%d  %-30s %-4s %10.1f steps/s\n' "$r" "$rounds" "$fname" "$side" "$sps" >&2
    done
  done
done

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')" || true
[[ -n "$cpu" ]] || cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
echo "flagship MLP, bare Model::train_step, $steps steps per measurement, median of $rounds alternating rounds"
echo "  machine: ${cpu:-unknown CPU}, $(nproc) cores"
echo "  base:    $base_label ($base_ref)"
echo "  head:    $head_label${head_ref:+ ($head_ref)}"
printf '  %-30s %13s %13s %10s  %s\n' "figure" "base steps/s" "head steps/s" "head/base" "result (head >= $(awk -v t="$tolerance" 'BEGIN {print 1 - t}') x base)"
for i in "${!figures[@]}"; do
  IFS='|' read -r fname _ _ <<<"${figures[$i]}"
  b="$(median <<<"${samples[base,$i]}")"
  h="$(median <<<"${samples[head,$i]}")"
  awk -v name="$fname" -v b="$b" -v h="$h" -v t="$tolerance" 'BEGIN {
    ratio = h / b
    printf "  %-30s %13.1f %13.1f %9.3fx  %s\n", name, b, h, ratio, (ratio >= 1 - t) ? "PASS" : "FAIL"
  }'
done | tee "$tmp/table"
if grep -q 'FAIL$' "$tmp/table"; then
  echo "FAIL: head is more than $tolerance below base on at least one figure (see above)"
else
  echo "PASS: head within $tolerance of base (or faster) on every figure"
fi
