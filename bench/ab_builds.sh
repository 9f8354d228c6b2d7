#!/usr/bin/env bash
# Interleaved A/B of two builds' bare Model::train_step with 2 replicas (bench/strategy_overhead):
# the question "did this change cost anything?" where bench/compare_commits.sh's few rounds cannot
# tell a few percent from this kind of VM's drift.
#
#   bench/ab_builds.sh [-t [-d DEVICES] [-m MODEL]] [-r ROUNDS] [-b GLOBAL_BATCH] [-n STEPS] BIN_A BIN_B
#     BIN_A, BIN_B  two strategy_overhead binaries (e.g. build-base/bin/strategy_overhead and
#                   build/bin/strategy_overhead); defaults: 21 rounds, global batch 128, 3000 steps
#     -t            two `lockstep` CLIs instead, each round `lockstep train --devices cpu:2
#                   --global-batch-size G --epochs 1 --steps-per-epoch N` (fit: pipeline,
#                   metrics, callbacks; its train_steps_per_second). Run from the repository
#                   (MNIST is found there).
#     -d DEVICES    with -t: --devices DEVICES instead of cpu:2 (e.g. cpu:1, with
#                   LOCKSTEP_CPU_THREADS=1 or 2 in the environment for one device's threads)
#     -m MODEL      with -t: --model MODEL (mlp, cnn, resnet20; default mlp)
#     -p            label each run with where the host placed the two CPUs: core_handoff (built
#                   beside the binaries' repository, build/bin/core_handoff, or $CORE_HANDOFF_BIN)
#                   probes for a second before and after it; "near" (SMT siblings, < 80 ns one
#                   way both times), "far" (two cores, both times) or "mixed". Then also prints,
#                   per label, each binary's median steps/s over its runs with that label: on a VM
#                   whose vCPUs move every few seconds, the comparison within "far" and within
#                   "near" is the one to read (PERFORMANCE 11)
#
# Each round runs both, one after the other, the order turning each round (A B, B A, ...), each
# run its own process: `strategy_overhead --replicas 2 --batch G --steps N`. Prints every round's
# pair of steps/s, then the median of the per-round ratios B/A and how many rounds B won. Under
# no difference, B wins about half the rounds.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
rounds=21 batch=128 steps=3000 train=0 devices=cpu:2 model=mlp placement=0
while getopts "td:m:pr:b:n:h" opt; do
  case "$opt" in
    t) train=1 ;;
    d) devices="$OPTARG" ;;
    m) model="$OPTARG" ;;
    p) placement=1 ;;
    r) rounds="$OPTARG" ;;
    b) batch="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    *) sed -n '2,28p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
(($# == 2)) || { sed -n '2,28p' "$0" >&2; exit 2; }
a="$1" b="$2"
positive_ints "$rounds" "$batch" "$steps"
for bin in "$a" "$b"; do
  [[ -x "$bin" ]] || { echo "ab_builds: '$bin' is not an executable" >&2; exit 2; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run() {
  if ((train == 0)); then
    "$1" --replicas 2 --batch "$batch" --steps "$steps" | awk '{print $2}'
    return
  fi
  rm -rf "$tmp/run"
  "$1" train --model "$model" --devices "$devices" --global-batch-size "$batch" --epochs 1 \
    --steps-per-epoch "$steps" --verbose 0 --logdir "$tmp/run" --no-tensorboard --metrics-out "$tmp/m.json" \
    >"$tmp/log" 2>&1 ||
    { echo "ab_builds: $1 train failed:" >&2; tail -n 3 "$tmp/log" >&2; exit 1; }
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["train_steps_per_second"])' "$tmp/m.json"
}
probe_bin="${CORE_HANDOFF_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/bin/core_handoff}"
if ((placement)); then
  [[ -x "$probe_bin" ]] || { echo "ab_builds: -p needs $probe_bin (cmake --build build --target core_handoff)" >&2; exit 2; }
fi
probe() {  # prints near or far: the one-way hand-off over one second
  "$probe_bin" --seconds 1 --interval-ms 1000 --label
}
labelled() {  # BIN: "steps/s label", or "steps/s -" without -p
  if ((placement == 0)); then echo "$(run "$1") -"; return; fi
  local before after r
  before=$(probe); r=$(run "$1"); after=$(probe)
  echo "$r $([[ "$before" == "$after" ]] && echo "$before" || echo mixed)"
}
pairs=()
for ((k = 1; k <= rounds; k++)); do
  if ((k % 2)); then x=$(labelled "$a"); y=$(labelled "$b"); else y=$(labelled "$b"); x=$(labelled "$a"); fi
  echo "round $k: A ${x% *} (${x##* })  B ${y% *} (${y##* }) steps/s"
  pairs+=("$x $y")
done
printf '%s\n' "${pairs[@]}" | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
r = [float(b) / float(a) for a, _, b, _ in rows]
print(f"median B/A {statistics.median(r):.3f} over {len(r)} rounds; B faster in {sum(x > 1 for x in r)}")
for label in ("near", "far", "mixed"):
    xa = [float(a) for a, la, _, _ in rows if la == label]
    xb = [float(b) for _, _, b, lb in rows if lb == label]
    if xa or xb:
        ma = f"{statistics.median(xa):.1f}" if xa else "-"
        mb = f"{statistics.median(xb):.1f}" if xb else "-"
        ratio = f"{statistics.median(xb) / statistics.median(xa):.3f}" if xa and xb else "-"
        print(f"  {label:5s}: A {ma} steps/s over {len(xa)} runs, B {mb} over {len(xb)}; B/A of medians {ratio}")'
