#!/usr/bin/env bash
# Image resizing's training cost (forward + backward to the images) under lockstep's resize_images
# (Resizing's and UpSampling2D's one resize), TensorFlow's tf.image.resize (eager or tf.function,
# the faster; intra-op THREADS, inter-op 1) and PyTorch 1.13's F.interpolate (THREADS threads),
# on the shapes below: a U-Net decoder's UpSampling2D, keras.io's Resizing in front of a model,
# an antialiased shrink and a bicubic growth. One after another, never concurrently, ROUNDS times,
# the order turning each round.
#
#   bench/compare_resize.sh [-R ROUNDS] [-t THREADS] [-n REPS]   (defaults: 5 rounds, 2 threads, 10 reps)
#   needs: build/bin/resize_bench (RESIZE_BENCH points elsewhere), a TF venv (LOCKSTEP_PY_VENV,
#          default <repo>/.venv-ref, scripts/setup_python.sh) and Debian's python3-torch (REF_PYTHON,
#          default /usr/bin/python3).
# Prints each round's milliseconds, then per shape the median of the per-round ratios lockstep's
# time / the faster reference's, with their range (below 1: lockstep is faster).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '9,12p' "$0" >&2; exit 2; }
rounds=5 threads=2 reps=10
while getopts "R:t:n:h" opt; do
  case "$opt" in
    R) rounds="$OPTARG" ;;
    t) threads="$OPTARG" ;;
    n) reps="$OPTARG" ;;
    *) usage ;;
  esac
done
positive_ints "$rounds" "$threads" "$reps"
bench_bin bench RESIZE_BENCH resize_bench
py_tf="${LOCKSTEP_PY_VENV:-$repo/.venv-ref}/bin/python"
py_torch="${REF_PYTHON:-/usr/bin/python3}"
for f in "$py_tf" "$py_torch"; do
  [[ -x "$f" ]] || { echo "compare_resize: missing $f (see this script's header)" >&2; exit 1; }
done
limit_library_threads "$threads"
export LOCKSTEP_CPU_THREADS="$threads"

# name: N H W C OUT_H OUT_W METHOD ANTIALIAS
shapes=(
  "unet_upsample2x: 16 64 64 32 128 128 bilinear 0"
  "resizing_front: 32 64 64 3 96 96 bilinear 0"
  "antialias_shrink: 8 224 224 3 160 160 bilinear 1"
  "bicubic_grow: 8 160 160 3 224 224 bicubic 0"
)

run() {  # framework, shape args: prints milliseconds (nan when it failed)
  local out
  case "$1" in
    lockstep) out="$("$bench" "${@:2}" "$reps" 2>&1)" || { echo "compare_resize: lockstep failed: $out" >&2; echo nan; return; } ;;
    tf) out="$("$py_tf" "$repo/bench/reference_resize.py" --framework tf --threads "$threads" "${@:2}" "$reps" 2>/dev/null)" || out=nan ;;
    torch) out="$("$py_torch" "$repo/bench/reference_resize.py" --framework torch --threads "$threads" "${@:2}" "$reps" 2>/dev/null)" || out=nan ;;
  esac
  tail -1 <<<"$out"
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $rounds rounds, $threads threads, $reps reps"
order=(lockstep tf torch)
for entry in "${shapes[@]}"; do
  name="${entry%%:*}" args=(${entry#*:})
  ratios=()
  for ((r = 0; r < rounds; r++)); do
    declare -A ms=()
    for ((k = 0; k < 3; k++)); do
      fw="${order[(r + k) % 3]}"
      ms[$fw]="$(run "$fw" "${args[@]}")"
    done
    ratio="$(python3 -c 'import math, sys
l, t, p = (float(v) for v in sys.argv[1:])
best = min(v for v in (t, p) if not math.isnan(v))
print(f"{l / best:.3f}")' "${ms[lockstep]}" "${ms[tf]}" "${ms[torch]}")"
    ratios+=("$ratio")
    echo "$name round $((r + 1)): lockstep ${ms[lockstep]} ms, tf ${ms[tf]} ms, torch ${ms[torch]} ms; ratio $ratio"
    unset ms
  done
  python3 -c 'import statistics, sys
v = sorted(map(float, sys.argv[2:]))
print(f"{sys.argv[1]}: lockstep / fastest reference = {statistics.median(v):.2f} (range {v[0]:.2f}-{v[-1]:.2f})")' \
    "$name" "${ratios[@]}"
done
