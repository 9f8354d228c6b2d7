#!/usr/bin/env bash
# Compares lockstep's training throughput on the flagship MNIST MLP with the
# PyTorch and TF/Keras references, on this machine, with the same thread count.
#
#   bench/compare_mlp.sh [-t THREADS] [-n STEPS]          (defaults: 1 thread, 2000 steps)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), REF_PYTHON (default .venv-ref/bin/python,
#        else /usr/bin/python3)
#
# Runs one after another (never concurrently, so they do not share cores):
#   lockstep:  LOCKSTEP_CPU_THREADS=T lockstep train --devices cpu:1 --epochs 1 --steps-per-epoch N
#              --batch-size 64 --metrics-out FILE   (reads train_steps_per_second)
#   torch, tf: bench/reference_mlp.py --framework both --threads T --steps N --json
# and prints each steps/s and the ratios lockstep/torch, lockstep/tf,
# lockstep/max(torch, tf). Exit 0 when all three ran, 1 otherwise.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
threads=1
steps=2000
while getopts "t:n:h" opt; do
  case "$opt" in
    t) threads="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done

bench_bin lockstep LOCKSTEP_BIN lockstep
py="$(reference_python "$repo")"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
limit_library_threads "$threads"

echo "== lockstep ($threads thread(s), $steps steps, batch 64)" >&2
ls_rc=0
LOCKSTEP_CPU_THREADS="$threads" "$lockstep" train --devices cpu:1 --epochs 1 --steps-per-epoch "$steps" --batch-size 64 --logdir "$tmp/run" --no-tensorboard \
  --metrics-out "$tmp/lockstep.json" >"$tmp/lockstep.log" 2>&1 || ls_rc=$?
if [[ $ls_rc -ne 0 ]]; then
  echo "compare_mlp: lockstep train failed (exit $ls_rc); its last output:" >&2
  tail -n 20 "$tmp/lockstep.log" >&2
fi

echo "== PyTorch and TF/Keras references ($py)" >&2
"$py" "$repo/bench/reference_mlp.py" --framework both --threads "$threads" --steps "$steps" --json \
  >"$tmp/ref.out" || true   # exit 3 = a framework unavailable; reported below

"$py" - "$tmp/lockstep.json" "$tmp/ref.out" "$threads" "$steps" <<'PYEOF'
import json, os, sys

ls_file, ref_file, threads, steps = sys.argv[1:5]
sps = {}
try:
    with open(ls_file) as f:
        sps["lockstep"] = float(json.load(f)["train_steps_per_second"])
except (OSError, ValueError, KeyError, TypeError) as e:
    print(f"compare_mlp: no train_steps_per_second from lockstep ({ls_file}): {e}", file=sys.stderr)
    sps["lockstep"] = None
ref = {}
try:
    with open(ref_file) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    ref = json.loads(lines[-1])
except (OSError, ValueError, IndexError) as e:
    print(f"compare_mlp: no result from bench/reference_mlp.py: {e}", file=sys.stderr)
sps["torch"] = ref.get("torch")
sps["tf"] = ref.get("tf")

print(f"flagship MLP, batch 64, {steps} steps, {threads} thread(s)")
for k, v in sps.items():
    print(f"  {k:9s} {'unavailable' if v is None else f'{v:10.1f} steps/s'}")

def ratio(name, den):
    ls = sps["lockstep"]
    if ls is None or den is None or den <= 0:
        print(f"  {name:26s} n/a")
    else:
        print(f"  {name:26s} {ls / den:6.2f}x")

ratio("lockstep/torch", sps["torch"])
ratio("lockstep/tf", sps["tf"])
best = max([v for v in (sps["torch"], sps["tf"]) if v is not None], default=None)
ratio("lockstep/max(torch,tf)", best)
sys.exit(0 if all(v is not None for v in sps.values()) else 1)
PYEOF
