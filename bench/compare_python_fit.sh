#!/usr/bin/env bash
# Issue 39, acceptance 3: the seeds' fit program (bench/python_fit.py: MirroredStrategy, the
# flagship MLP, tf.data from_tensor_slices/batch/repeat) under lockstep's Python package, against
# the same job through the C++ CLI (`lockstep train`, 2 replicas x the same batch) and against
# TensorFlow running the same Python code (`import tensorflow as tf`; TF mirrors over one CPU
# device, so examples/s are compared). TF runs twice a round, with its default threads and tuned
# (intra-op = cores, inter-op 1), and the faster counts (docs/PERFORMANCE.md's fair references).
# The runs follow one another in each round; the order turns each round.
#
#   bench/compare_python_fit.sh [-R ROUNDS] [-e EPOCHS] [-b BATCH_PER_REPLICA]
#     defaults: 5 rounds, 2 epochs, 64 per replica
#   needs: scripts/setup_python_pkg.sh (.venv-py) and scripts/setup_python.sh (.venv-ref, TF);
#   env: LOCKSTEP_PY_VENV for the TF venv (default <repo>/.venv-ref), LOCKSTEP_BIN (default build/bin/lockstep)
# Prints each round's examples/s, then the median of the per-round ratios python / CLI (goal
# >= 0.95) and python / TF (the faster TF of the round; goal >= 3) with their ranges, and python
# over each TF setting alone.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,16p' "$0" >&2; exit 2; }
rounds=5
epochs=2
batch=64
while (($#)); do
  case "$1" in
    -R) [[ $# -ge 2 ]] || usage; rounds="$2"; shift 2 ;;
    -e) [[ $# -ge 2 ]] || usage; epochs="$2"; shift 2 ;;
    -b) [[ $# -ge 2 ]] || usage; batch="$2"; shift 2 ;;
    *) usage ;;
  esac
done
py_pkg="$repo/.venv-py/bin/python"
py_tf="${LOCKSTEP_PY_VENV:-$repo/.venv-ref}/bin/python"
bench_bin cli LOCKSTEP_BIN lockstep
for f in "$py_pkg" "$py_tf"; do
  [[ -x "$f" ]] || { echo "compare_python_fit: missing $f (see this script's header)" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# examples/s of one run of each side
run_python() {
  "$py_pkg" "$repo/bench/python_fit.py" --framework lockstep --epochs "$epochs" --batch-per-replica "$batch" 2>/dev/null |
    tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["examples_per_second"])'
}
run_tf() {  # threads: default or tuned
  "$py_tf" "$repo/bench/python_fit.py" --framework tensorflow --tf-threads "$1" --epochs "$epochs" \
    --batch-per-replica "$batch" 2>/dev/null |
    tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["examples_per_second"])'
}
run_cli() {
  rm -rf "$tmp/run"
  (cd "$repo" && "$cli" train --devices cpu:2 --batch-size "$batch" --epochs "$epochs" --logdir "$tmp/run" \
    --metrics-out "$tmp/m.json" >/dev/null 2>&1)
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train_steps_per_second"] * 2 * int(sys.argv[2]))' \
    "$tmp/m.json" "$batch"
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $rounds rounds, $epochs epochs, $batch per replica"
: >"$tmp/ratios"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then p=$(run_python); c=$(run_cli); td=$(run_tf default); tt=$(run_tf tuned)
  else tt=$(run_tf tuned); td=$(run_tf default); c=$(run_cli); p=$(run_python); fi
  t=$(python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$td" "$tt")
  echo "round $r: python $p  cli $c  tf $t (default threads $td, tuned $tt) examples/s"
  echo "$p $c $t $td $tt" >>"$tmp/ratios"
done
python3 - "$tmp/ratios" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
for name, i, goal in (("python / CLI", 1, 0.95), ("python / TF ", 2, 3.0),
                      ("  (TF default threads only)", 3, 3.0), ("  (TF tuned threads only)", 4, 3.0)):
    r = [row[0] / row[i] for row in rows]
    print(f"  {name}  {statistics.median(r):.3f}  (median of per-round ratios, range {min(r):.3f} to {max(r):.3f}; goal >= {goal})")
EOF
