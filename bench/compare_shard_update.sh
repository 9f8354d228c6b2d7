#!/usr/bin/env bash
# The sharded optimizer update (ZeRO stage 1, MirroredOptions::shard_optimizer_update) against
# every replica updating all of its copies (--no-shard-update to strategy_overhead and to
# `lockstep train`), on the flagship MLP with 2 CPU replicas, in interleaved rounds (this VM
# drifts by tens of percent within minutes, so only pairs measured back to back compare).
#
#   bench/compare_shard_update.sh [-n STEPS] [-R ROUNDS] [-b "G1 G2 ..."] [-w]
#     -n  timed steps per run (default 2000)
#     -R  rounds (default 8): in each, for each global batch, bare train_step sharded, then
#         unsharded, then `lockstep train` sharded, then unsharded
#     -b  global batch sizes (default "128 256")
#     -w  also 2 workers x 1 device (`mpirun -np 2 lockstep train --devices cpu:1`, workers in
#         lockstep's shared-memory segment), sharded then unsharded, in each round
#   env: LOCKSTEP_BIN (default build/bin/lockstep), STRATEGY_OVERHEAD_BIN (default
#        build/bin/strategy_overhead)
# Prints, per global batch and measure, the median and best steps/s of each and the ratio of the
# medians (sharded / unsharded), and the median of the per-round ratios. Exit 1 if a run fails,
# 2 on bad usage.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,18p' "$0" >&2; exit 2; }
steps=2000
rounds=8
batches="128 256"
kinds="bare train"
while (($#)); do
  case "$1" in
    -n) [[ $# -ge 2 ]] || usage; steps="$2"; shift 2 ;;
    -R) [[ $# -ge 2 ]] || usage; rounds="$2"; shift 2 ;;
    -b) [[ $# -ge 2 ]] || usage; batches="$2"; shift 2 ;;
    -w) kinds="bare train workers"; shift ;;
    -h|--help) usage ;;
    *) echo "compare_shard_update: unknown argument '$1'" >&2; usage ;;
  esac
done
positive_ints "$steps" "$rounds" $batches
((steps >= 100)) || { echo "compare_shard_update: -n must be >= 100" >&2; exit 2; }
bench_bin lockstep LOCKSTEP_BIN lockstep
bench_bin bare STRATEGY_OVERHEAD_BIN strategy_overhead
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [[ "$kinds" == *workers* ]]; then
  command -v mpirun >/dev/null || { echo "compare_shard_update: -w needs mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

run() {  # SHARD(1|0) KIND(bare|train) G: prints steps/s
  local shard="$1" kind="$2" g="$3" out off=()
  ((shard)) || off=(--no-shard-update)
  if [[ "$kind" == bare ]]; then
    out="$("$bare" --replicas 2 --batch "$g" --steps "$steps" "${off[@]}" 2>"$tmp/err")" ||
      { echo "compare_shard_update: strategy_overhead failed: $(tail -n 3 "$tmp/err")" >&2; exit 1; }
    echo "${out#steps_per_second }"
  else
    local launch=() devices=cpu:2
    if [[ "$kind" == workers ]]; then launch=(mpirun -np 2); devices=cpu:1; fi
    # fit warms up on its first 5% of steps; run that many more so both time `steps`.
    LOCKSTEP_WORKER_SHM=1 "${launch[@]}" "$lockstep" train --devices "$devices" "${off[@]}" \
      --global-batch-size "$g" --epochs 1 \
      --steps-per-epoch $((steps + steps / 19)) --verbose 0 --logdir "$tmp/run" --no-tensorboard \
      --metrics-out "$tmp/m.json" >"$tmp/log" 2>&1 ||
      { echo "compare_shard_update: lockstep train failed: $(tail -n 3 "$tmp/log")" >&2; exit 1; }
    rm -rf "$tmp/run"
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["train_steps_per_second"])' "$tmp/m.json"
  fi
}

for ((round = 1; round <= rounds; ++round)); do
  echo "== round $round of $rounds" >&2
  for g in $batches; do
    for kind in $kinds; do
      for shard in 1 0; do echo "$g $kind $shard $(run "$shard" "$kind" "$g")" >>"$tmp/results"; done
    done
  done
done

echo "flagship MLP, 2 CPU replicas; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "$rounds interleaved rounds of $steps timed steps; global steps/s"
python3 - "$tmp/results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'G':>5} {'measure':<16} {'sharded med':>12} {'best':>9} {'unsharded med':>14} {'best':>9} {'ratio of medians':>17} {'median ratio':>13}")
for g in dict.fromkeys(r[0] for r in rows):
    for kind, label in (("bare", "bare train_step"), ("train", "lockstep train"), ("workers", "2 workers x 1")):
        if not any(r[1] == kind for r in rows):
            continue
        on = [float(r[3]) for r in rows if r[0] == g and r[1] == kind and r[2] == "1"]
        off = [float(r[3]) for r in rows if r[0] == g and r[1] == kind and r[2] == "0"]
        ratios = [a / b for a, b in zip(on, off)]
        print(f"{g:>5} {label:<16} {statistics.median(on):>12.1f} {max(on):>9.1f} {statistics.median(off):>14.1f} "
              f"{max(off):>9.1f} {statistics.median(on) / statistics.median(off):>17.3f} {statistics.median(ratios):>13.3f}")
EOF
