#!/usr/bin/env bash
# Compares lockstep's training throughput on the flagship MNIST MLP with the PyTorch and TF/Keras
# references, on this machine, with the same thread count, in interleaved rounds.
#
#   bench/compare_mlp.sh [-t THREADS] [-n STEPS] [-R ROUNDS]   (defaults: 1 thread, 2000 steps, 3 rounds)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), REF_PYTHON (default .venv-ref/bin/python,
#        else /usr/bin/python3)
#
# Each round runs, one after another (never concurrently, so they do not share cores):
#   lockstep:  LOCKSTEP_CPU_THREADS=T lockstep train --devices cpu:1 --epochs 1 --steps-per-epoch N
#              --batch-size 64 --metrics-out FILE   (reads train_steps_per_second)
#   torch, tf, libtorch: bench/reference_mlp.py --framework all --threads T --steps N --json (each at
#              its best thread settings: torch's own pool or OpenBLAS', TF's default or tuned;
#              libtorch is the same model in C++, bench/reference_libtorch.cpp, needs libtorch-dev)
# and prints each one's median steps/s with every round's, then the medians of the per-round ratios
# lockstep/each and lockstep/max(all three) with their ranges (bench/rounds.py). Exit 0 when every
# run gave a figure.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
threads=1 steps=2000 rounds=3
while getopts "t:n:R:h" opt; do
  case "$opt" in
    t) threads="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    R) rounds="$OPTARG" ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
positive_ints "$threads" "$steps" "$rounds"

bench_bin lockstep LOCKSTEP_BIN lockstep
py="$(reference_python "$repo")"
openblas_check --install  # torch's best configuration (bench/lib.sh): installed as root, else a warning
libtorch_check

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
limit_library_threads "$threads"

for ((round = 1; round <= rounds; round++)); do
  echo "== round $round: lockstep ($threads thread(s), $steps steps, batch 64)" >&2
  ls_rc=0
  LOCKSTEP_CPU_THREADS="$threads" "$lockstep" train --devices cpu:1 --epochs 1 --steps-per-epoch "$steps" \
    --batch-size 64 --logdir "$tmp/run$round" --no-tensorboard --metrics-out "$tmp/lockstep.$round.json" \
    >"$tmp/lockstep.$round.log" 2>&1 || ls_rc=$?
  if [[ $ls_rc -ne 0 ]]; then
    echo "compare_mlp: lockstep train failed (exit $ls_rc); its last output:" >&2
    tail -n 20 "$tmp/lockstep.$round.log" >&2
  fi
  echo "== round $round: PyTorch, TF/Keras and libtorch references ($py)" >&2
  "$py" "$repo/bench/reference_mlp.py" --framework all --threads "$threads" --steps "$steps" --json \
    >"$tmp/ref.$round.out" || true   # exit 3 = a framework unavailable; reported below
done

"$py" - "$tmp" "$threads" "$steps" "$rounds" "$repo/bench" <<'PYEOF'
import json, sys

tmp, threads, steps, rounds, bench = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
refs = ("torch", "tf", "libtorch")
per = {k: [None] * rounds for k in ("lockstep",) + refs}
for r in range(rounds):
    try:
        with open(f"{tmp}/lockstep.{r + 1}.json") as f:
            per["lockstep"][r] = float(json.load(f)["train_steps_per_second"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"compare_mlp: round {r + 1}: no train_steps_per_second from lockstep: {e}", file=sys.stderr)
    try:
        with open(f"{tmp}/ref.{r + 1}.out") as f:
            ref = json.loads([l for l in f.read().splitlines() if l.strip()][-1])
        for fw in refs:
            if ref.get(fw) is not None:
                per[fw][r] = float(ref[fw])
    except (OSError, ValueError, IndexError) as e:
        print(f"compare_mlp: round {r + 1}: no result from bench/reference_mlp.py: {e}", file=sys.stderr)

print(f"flagship MLP, batch 64, {steps} steps, {threads} thread(s), {rounds} interleaved round(s)")
sys.path.insert(0, bench)
import rounds as summary
sys.exit(0 if summary.report(per, mine=["lockstep"], refs=list(refs)) else 1)
PYEOF
