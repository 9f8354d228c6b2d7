#!/usr/bin/env bash
# Issue 36, acceptance 3: a custom training loop over experimental_distribute_dataset
# (strategy.run + GradientTape + apply_gradients) against `fit`, on the flagship MLP (Dense 128
# relu -> Dropout 0.2 -> Dense 10 softmax, Adam 1e-3, MNIST) at global batch 128 on 2 CPU
# replicas, in one process with the two interleaved in rounds (this VM drifts by tens of
# percent within minutes, so only segments measured back to back compare).
#
#   bench/compare_custom_loop.sh [-n STEPS] [-R ROUNDS] [-r REPLICAS] [-b GLOBAL_BATCH]
#     defaults: 400 steps per segment, 15 rounds, 2 replicas, batch 128
#   env: CUSTOM_LOOP_BIN (default build/bin/custom_loop_overhead)
# Prints each mode's median steps/s and the median of the per-round ratios custom / fit with
# its range (goal >= 0.95). Exit 0 when the goal is met, 3 when it is not, 1 if the run fails,
# 2 on bad usage.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,13p' "$0" >&2; exit 2; }
steps=400
rounds=15
replicas=2
batch=128
while (($#)); do
  case "$1" in
    -n) [[ $# -ge 2 ]] || usage; steps="$2"; shift 2 ;;
    -R) [[ $# -ge 2 ]] || usage; rounds="$2"; shift 2 ;;
    -r) [[ $# -ge 2 ]] || usage; replicas="$2"; shift 2 ;;
    -b) [[ $# -ge 2 ]] || usage; batch="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "compare_custom_loop: unknown argument '$1'" >&2; usage ;;
  esac
done
positive_ints "$steps" "$rounds" "$replicas" "$batch"
((steps >= 40)) || { echo "compare_custom_loop: -n must be >= 40" >&2; exit 2; }
bench_bin bin CUSTOM_LOOP_BIN custom_loop_overhead

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$bin" --replicas "$replicas" --batch "$batch" --steps "$steps" --rounds "$rounds" | tee "$out" ||
  { echo "compare_custom_loop: custom_loop_overhead failed" >&2; exit 1; }
ratio="$(sed -n 's/^  custom \/ fit *\([0-9.]*\).*/\1/p' "$out")"
[[ -n "$ratio" ]] || { echo "compare_custom_loop: no ratio in the output" >&2; exit 1; }
awk -v r="$ratio" 'BEGIN { exit !(r >= 0.95) }' && exit 0
echo "compare_custom_loop: custom / fit = $ratio is below the goal of 0.95" >&2
exit 3
