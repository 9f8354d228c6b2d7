#!/usr/bin/env bash
# Compares lockstep's training throughput on a convnet with PyTorch and TF/Keras, on this machine,
# with the same thread count: Keras' simple MNIST convnet (lockstep train --model cnn) or ResNet-20
# with BatchNormalization (-m resnet20; bench/reference_cnn.py describes both models).
#
#   bench/compare_cnn.sh [-m cnn|resnet20] [-t THREADS] [-n STEPS] [-b BATCH] [-r ROUNDS]
#     (defaults: cnn, 2 threads, 300 steps, batch 128, 3 rounds)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), REF_PYTHON (as bench/compare_mlp.sh)
#
# Runs one after another (never concurrently), ROUNDS times in turn:
#   lockstep, one device:  LOCKSTEP_CPU_THREADS=T lockstep train --model M --devices cpu:1 ...
#   lockstep, T replicas:  lockstep train --model M --devices cpu:T ... (one core each)
#   torch, tf:             bench/reference_cnn.py --model M --threads T --steps N --batch B --json
# all at global batch B (each reference at its best thread settings), and prints each one's median
# steps/s with every round's figure, then lockstep's better layout of a round over each reference
# as the median of the per-round ratios with their range (bench/rounds.py), with the seconds of
# steal (/proc/stat) during the run.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
model=cnn threads=2 steps=300 batch=128 rounds=3
while getopts "m:t:n:b:r:h" opt; do
  case "$opt" in
    m) model="$OPTARG" ;;
    t) threads="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    b) batch="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
[[ "$model" == cnn || "$model" == resnet20 ]] || { echo "compare_cnn: -m must be cnn or resnet20, got '$model'" >&2; exit 2; }
positive_ints "$threads" "$steps" "$batch" "$rounds"
bench_bin lockstep LOCKSTEP_BIN lockstep
py="$(reference_python "$repo")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
limit_library_threads "$threads"

run_lockstep() {  # name, devices, extra env
  local name="$1" devices="$2"
  echo "== round $round: lockstep ${name%.*} ($devices, $steps steps, global batch $batch)" >&2
  if ! env $3 "$lockstep" train --model "$model" --devices "$devices" --epochs 1 --steps-per-epoch "$steps" \
      --global-batch-size "$batch" --logdir "$tmp/$name" --no-tensorboard --verbose 0 \
      --metrics-out "$tmp/$name.json" >"$tmp/$name.log" 2>&1; then
    echo "compare_cnn: lockstep $name failed; its last output:" >&2
    tail -n 20 "$tmp/$name.log" >&2
  fi
}
# Time a shared VM's host took from it (steal, /proc/stat's 8th cpu field) while all of it ran:
# a run with much of it compares frameworks that each lost a different share.
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat 2>/dev/null || echo 0; }
steal0="$(steal_ticks)" start="$(date +%s)"
for ((round = 1; round <= rounds; round++)); do
  run_lockstep "one_device.$round" cpu:1 "LOCKSTEP_CPU_THREADS=$threads"
  run_lockstep "replicas.$round" "cpu:$threads" ""
  echo "== round $round: PyTorch and TF/Keras references ($py)" >&2
  "$py" "$repo/bench/reference_cnn.py" --model "$model" --framework both --threads "$threads" --steps "$steps" --batch "$batch" \
    --json >"$tmp/ref.$round.out" || true
done

steal_s=$(( ($(steal_ticks) - steal0) / $(getconf CLK_TCK) )) elapsed_s=$(( $(date +%s) - start ))
"$py" - "$tmp" "$threads" "$steps" "$batch" "$rounds" "$steal_s" "$elapsed_s" "$model" "$repo/bench" <<'PYEOF'
import json, sys
tmp, threads, steps, batch, rounds, steal_s, elapsed_s, model, bench = sys.argv[1:10]
rounds = int(rounds)
per = {k: [None] * rounds for k in ("lockstep_one_device", "lockstep_replicas", "torch", "tf")}
for r in range(rounds):
    for name in ("one_device", "replicas"):
        try:
            with open(f"{tmp}/{name}.{r + 1}.json") as f:
                per[f"lockstep_{name}"][r] = float(json.load(f)["train_steps_per_second"])
        except (OSError, ValueError, KeyError) as e:
            print(f"compare_cnn: round {r + 1}: no steps/s from lockstep {name}: {e}", file=sys.stderr)
    try:
        with open(f"{tmp}/ref.{r + 1}.out") as f:
            ref = json.loads([l for l in f.read().splitlines() if l.strip()][-1])
        for fw in ("torch", "tf"):
            if ref.get(fw) is not None:
                per[fw][r] = float(ref[fw])
    except (OSError, ValueError, IndexError) as e:
        print(f"compare_cnn: round {r + 1}: no result from bench/reference_cnn.py: {e}", file=sys.stderr)
print(f"{'simple MNIST convnet' if model == 'cnn' else 'ResNet-20 on MNIST'}, global batch {batch}, {steps} steps, "
      f"{threads} thread(s), {rounds} interleaved round(s)")
print(f"  steal (time the VM's host took): {steal_s} s over the run's {elapsed_s} s")
sys.path.insert(0, bench)
import rounds as summary
ok = summary.report(per, mine=["lockstep_one_device", "lockstep_replicas"], refs=["torch", "tf"])
sys.exit(0 if ok else 1)
PYEOF
