#!/usr/bin/env bash
# Recurrent layers' training speed: keras.io's text classifier shape (Embedding -> LSTM or GRU ->
# Dense(1, sigmoid); bench/rnn_fit.py describes it) under lockstep's Python package, TensorFlow
# running the same Keras code (its default threads and intra-op = THREADS / inter-op 1, the
# faster of the round) and PyTorch 1.13 (nn.LSTM / nn.GRU, OpenBLAS, the same cores: torch's threads
# and OpenBLAS' fight each other (OpenBLAS' pthreads beside torch's OpenMP ones: 9 steps/s where
# either alone gives 26-32), so torch runs once per setting of torch_pools in bench/reference_mlp.py,
# its own THREADS threads over a one-thread OpenBLAS and one torch thread over a THREADS-thread
# OpenBLAS, and the faster counts).
# One after another, never concurrently, ROUNDS times, the order turning each round.
#
#   bench/compare_rnn.sh [-l lstm|gru|both] [-R ROUNDS] [-t THREADS] [-b BATCH] [-T LENGTH] [-n STEPS]
#     defaults: both, 3 rounds, 2 threads, batch 64, 100 steps of time, 30 steps an epoch
#   needs: the package venv (LOCKSTEP_PY_PKG_VENV, default <repo>/.venv-py, scripts/setup_python_pkg.sh),
#          a TF venv (LOCKSTEP_PY_VENV, default <repo>/.venv-ref, scripts/setup_python.sh) and
#          Debian's python3-torch (REF_PYTHON, default /usr/bin/python3).
# Prints each round's steps/s, then per layer the median of the per-round ratios lockstep / torch,
# lockstep / TF and lockstep / the faster of the two, with their ranges.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '8,13p' "$0" >&2; exit 2; }
layers="lstm gru" rounds=3 threads=2 batch=64 length=100 steps=30
while getopts "l:R:t:b:T:n:h" opt; do
  case "$opt" in
    l) [[ "$OPTARG" == both ]] && layers="lstm gru" || layers="$OPTARG" ;;
    R) rounds="$OPTARG" ;;
    t) threads="$OPTARG" ;;
    b) batch="$OPTARG" ;;
    T) length="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    *) usage ;;
  esac
done
[[ "$layers" == "lstm gru" || "$layers" == lstm || "$layers" == gru ]] ||
  { echo "compare_rnn: -l must be lstm, gru or both, got '$layers'" >&2; exit 2; }
positive_ints "$rounds" "$threads" "$batch" "$length" "$steps"
py_pkg="${LOCKSTEP_PY_PKG_VENV:-$repo/.venv-py}/bin/python"
py_tf="${LOCKSTEP_PY_VENV:-$repo/.venv-ref}/bin/python"
py_torch="${REF_PYTHON:-/usr/bin/python3}"
for f in "$py_pkg" "$py_tf" "$py_torch"; do
  [[ -x "$f" ]] || { echo "compare_rnn: missing $f (see this script's header)" >&2; exit 1; }
done
openblas_check --install  # torch's best configuration (bench/lib.sh): installed as root, else a warning
limit_library_threads "$threads"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() {  # python, framework, layer, extra flags: prints steps/s (0 when the run failed)
  local out
  if out="$("$1" "$repo/bench/rnn_fit.py" --framework "$2" --layer "$3" --threads "$threads" --batch "$batch" \
      --length "$length" --steps "$steps" "${@:4}" 2>"$tmp/err")"; then
    tail -1 <<<"$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["steps_per_second"])'
  else
    echo "compare_rnn: $2 $3 failed; its last output:" >&2; tail -n 5 "$tmp/err" >&2; echo 0
  fi
}

# PyTorch's thread settings, "TORCH_THREADS OPENBLAS_THREADS" a line, from their one owner
# (torch_pools in bench/reference_mlp.py); torch_best LAYER runs each and prints the faster (each
# setting's figure goes to $tmp/pools).
mapfile -t torch_pools < <(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import reference_mlp as r
for _, t, b in r.torch_pools(int(sys.argv[2])): print(t, b)' "$repo/bench" "$threads")
((${#torch_pools[@]})) || { echo "compare_rnn: no torch thread settings from bench/reference_mlp.py" >&2; exit 1; }
torch_best() {
  local pool t b v best=0 each=""
  for pool in "${torch_pools[@]}"; do
    read -r t b <<<"$pool"
    v=$(OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$b run "$py_torch" torch "$1" --threads "$t")
    each+="${each:+, }$v (torch $t, OpenBLAS $b)"
    best=$(python3 -c 'import sys; print(max(map(float, sys.argv[1:])))' "$best" "$v")
  done
  echo "$each" >"$tmp/pools"
  echo "$best"
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $rounds rounds, $threads threads," \
  "batch $batch, $length time steps, $steps steps an epoch"
for layer in $layers; do
  : >"$tmp/$layer"
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
      l=$(run "$py_pkg" lockstep "$layer"); p=$(torch_best "$layer")
      td=$(run "$py_tf" tensorflow "$layer" --tf-threads default); tt=$(run "$py_tf" tensorflow "$layer" --tf-threads tuned)
    else
      tt=$(run "$py_tf" tensorflow "$layer" --tf-threads tuned); td=$(run "$py_tf" tensorflow "$layer" --tf-threads default)
      p=$(torch_best "$layer"); l=$(run "$py_pkg" lockstep "$layer")
    fi
    echo "$layer round $r: lockstep $l  torch $p ($(cat "$tmp/pools"))  tf $td (default threads) / $tt (tuned) steps/s"
    echo "$l $p $td $tt" >>"$tmp/$layer"
  done
  python3 - "$tmp/$layer" "$layer" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
def ratios(ref):
    r = [row[0] / ref(row) for row in rows if row[0] > 0 and ref(row) > 0]
    return f"{statistics.median(r):.2f}x (range {min(r):.2f} to {max(r):.2f})" if r else "n/a"
print(f"  {sys.argv[2]}: lockstep / torch {ratios(lambda row: row[1])}; lockstep / TF {ratios(lambda row: max(row[2], row[3]))};"
      f" lockstep / best {ratios(lambda row: max(row[1], row[2], row[3]))}  (medians of per-round ratios)")
EOF
done
