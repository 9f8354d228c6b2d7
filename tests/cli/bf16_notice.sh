#!/usr/bin/env bash
# bf16_notice.sh CLI WORK : mixed_bfloat16 on a CPU whose bfloat16 GEMMs are widened to float32
# says once per process that it is slower there: forced (LOCKSTEP_BF16_GEMM=widen), on 2 replicas,
# the notice is one line; by default it appears exactly when the host lacks AVX512_BF16
# (/proc/cpuinfo); float32 training never prints it.
set -uo pipefail
cli="$1"; work="$2"
rm -rf "$work" && mkdir -p "$work"
notices() {  # notices LOGDIR POLICY [VAR=VALUE...] : a short training; prints how many notice lines it wrote
  local dir="$1" policy="$2"; shift 2
  local out
  out="$(env "$@" "$cli" train --policy "$policy" --devices cpu:2 --epochs 1 --steps-per-epoch 2 --verbose 0 \
    --no-tensorboard --logdir "$work/$dir" 2>&1)" || { echo "$out" >&2; echo "FAIL: the $dir run failed" >&2; exit 1; }
  grep -c "notice: bfloat16 on the CPU is slower than float32" <<<"$out" || true  # 0 matches: status 1
}
n="$(notices widen mixed_bfloat16 LOCKSTEP_BF16_GEMM=widen)" || exit 1
[[ "$n" -eq 1 ]] || { echo "FAIL: widened bfloat16 printed the notice $n times, want 1"; exit 1; }
grep -qw avx512_bf16 /proc/cpuinfo && want=0 || want=1
n="$(notices default mixed_bfloat16)" || exit 1
[[ "$n" -eq "$want" ]] || { echo "FAIL: mixed_bfloat16 printed the notice $n times on this CPU, want $want"; exit 1; }
n="$(notices float32 float32 LOCKSTEP_BF16_GEMM=widen)" || exit 1
[[ "$n" -eq 0 ]] || { echo "FAIL: float32 training printed the bfloat16 notice"; exit 1; }
echo "ok: the notice is one line where bfloat16 GEMMs are widened ($want by default on this CPU), none for float32"
