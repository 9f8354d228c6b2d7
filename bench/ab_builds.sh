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
#
# Each round runs both, one after the other, the order turning each round (A B, B A, ...), each
# run its own process: `strategy_overhead --replicas 2 --batch G --steps N`. Prints every round's
# pair of steps/s, then the median of the per-round ratios B/A and how many rounds B won. Under
# no difference, B wins about half the rounds.
set -euo pipefail
rounds=21 batch=128 steps=3000 train=0 devices=cpu:2 model=mlp
while getopts "td:m:r:b:n:h" opt; do
  case "$opt" in
    t) train=1 ;;
    d) devices="$OPTARG" ;;
    m) model="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    b) batch="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    *) sed -n '2,21p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
(($# == 2)) || { sed -n '2,21p' "$0" >&2; exit 2; }
a="$1" b="$2"
for v in "$rounds" "$batch" "$steps"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "ab_builds: '$v' is not a positive integer" >&2; exit 2; }
done
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
