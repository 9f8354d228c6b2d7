#!/usr/bin/env bash
# Interleaved A/B of two builds' bare Model::train_step with 2 replicas (bench/strategy_overhead):
# the question "did this change cost anything?" where bench/compare_commits.sh's few rounds cannot
# tell a few percent from this kind of VM's drift.
#
#   bench/ab_builds.sh [-r ROUNDS] [-b GLOBAL_BATCH] [-n STEPS] BIN_A BIN_B
#     BIN_A, BIN_B  two strategy_overhead binaries (e.g. build-base/bin/strategy_overhead and
#                   build/bin/strategy_overhead); defaults: 21 rounds, global batch 128, 3000 steps
#
# Each round runs both, one after the other, the order turning each round (A B, B A, ...), each
# run its own process: `strategy_overhead --replicas 2 --batch G --steps N`. Prints every round's
# pair of steps/s, then the median of the per-round ratios B/A and how many rounds B won. Under
# no difference, B wins about half the rounds.
set -euo pipefail
rounds=21 batch=128 steps=3000
while getopts "r:b:n:h" opt; do
  case "$opt" in
    r) rounds="$OPTARG" ;;
    b) batch="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
(($# == 2)) || { sed -n '2,14p' "$0" >&2; exit 2; }
a="$1" b="$2"
for v in "$rounds" "$batch" "$steps"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "ab_builds: '$v' is not a positive integer" >&2; exit 2; }
done
for bin in "$a" "$b"; do
  [[ -x "$bin" ]] || { echo "ab_builds: '$bin' is not an executable" >&2; exit 2; }
done
run() { "$1" --replicas 2 --batch "$batch" --steps "$steps" | awk '{print $2}'; }
pairs=()
for ((k = 1; k <= rounds; k++)); do
  if ((k % 2)); then x=$(run "$a"); y=$(run "$b"); else y=$(run "$b"); x=$(run "$a"); fi
  echo "round $k: A $x  B $y steps/s"
  pairs+=("$x $y")
done
printf '%s\n' "${pairs[@]}" | python3 -c '
import statistics, sys
r = [float(b) / float(a) for a, b in (l.split() for l in sys.stdin if l.strip())]
print(f"median B/A {statistics.median(r):.3f} over {len(r)} rounds; B faster in {sum(x > 1 for x in r)}")'
