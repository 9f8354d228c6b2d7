#!/usr/bin/env bash
# The one command for a GPU machine (issue 13): runs the gpu tests, the backend-parity rows on
# CUDA, 4 logical replicas on one GPU against one device, and the GPU benchmarks against PyTorch,
# and writes one report. Made for a machine without a compiler or a package registry (an H200
# with a CUDA 13 driver and PyTorch 2.11 in its python3): its binaries come from gpu-bundle/ or
# gpu-bundle.tar.xz (scripts/gpu_bundle.sh, run where nvcc is, then carried along), else from
# build/ (a build with CUDA on this machine). At most 11 minutes: every phase has a time limit
# (120 + 60 + 45 + 30 + 60 + 40 + 60 + 150 + 90 s), and they usually take far less (about 2½
# minutes in all on an H200, most of it PyTorch compiling).
#   scripts/gpu_check.sh [bundle-or-build-dir]      report: $OUT/gpu_check_report.txt (or ./)
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
report_dir="${OUT:-$repo}"
report="$report_dir/gpu_check_report.txt"
mkdir -p "$report_dir"
: >"$report"
say() { printf '%s\n' "$*" | tee -a "$report"; }

# ---- binaries ----
dir="${1:-}"
if [[ -z "$dir" && ! -x gpu-bundle/bin/gpu_tests && -f gpu-bundle.tar.xz ]]; then
  unpack="${TMPDIR:-/tmp}/lockstep-gpu-check"
  rm -rf "$unpack" && mkdir -p "$unpack"
  # Python's tarfile where the machine has no xz program (tar -J needs one).
  if tar -xJf gpu-bundle.tar.xz -C "$unpack" 2>/dev/null ||
     "${PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
       gpu-bundle.tar.xz "$unpack"; then
    dir="$unpack/gpu-bundle"
  fi
fi
if [[ -z "$dir" ]]; then
  if [[ -x gpu-bundle/bin/gpu_tests ]]; then dir=gpu-bundle; else dir=build; fi
fi
data_dir="${LOCKSTEP_DATA_DIR:-$HOME/.lockstep/datasets}"
if [[ -x "$dir/bin/gpu_tests" ]]; then
  bin="$dir/bin"; gpu_tests="$bin/gpu_tests"; backend_tests="$bin/backend_tests"; gpu_bench="$bin/gpu_bench"
  cli="$bin/lockstep"; custom_loop="$bin/custom_loop"
  [[ -d "$dir/data/mnist" ]] && data_dir="$(cd "$dir/data" && pwd)"
elif [[ -x "$dir/tests/gpu_tests" ]]; then
  gpu_tests="$dir/tests/gpu_tests"; backend_tests="$dir/tests/backend_tests"; gpu_bench="$dir/bin/gpu_bench"
  cli="$dir/bin/lockstep"; custom_loop="$dir/bin/custom_loop"
else
  echo "gpu_check: no gpu_tests under $dir: run scripts/gpu_bundle.sh where nvcc is and carry gpu-bundle/," >&2
  echo "gpu_check: or build here (scripts/build.sh) when this machine has the CUDA toolkit" >&2
  exit 1
fi

# ---- libraries: the bundle's, then cuBLASLt / cuDNN / NCCL / cudart from PyTorch's wheels or CUDA
# (cuDNN's runtime-compiled engines need NVRTC, which comes from the same place) ----
libs=()
lib_notes=()
[[ -d "$dir/lib" ]] && libs+=("$(cd "$dir/lib" && pwd)")
py="${PYTHON:-python3}"
site="$("$py" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null || true)"
for pattern in 'libcublasLt.so.13*' 'libcudnn.so.9*' 'libnccl.so.2*' 'libcudart.so.13*' 'libnvrtc.so.13*'; do
  found=""
  for root in ${site:+"$site/nvidia" "$site/torch/lib"} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d "$root" ]] || continue
    f="$(find "$root" -name "$pattern" -print -quit 2>/dev/null)"
    if [[ -n "$f" ]]; then found="$(dirname "$f")"; break; fi
  done
  if [[ -n "$found" ]]; then libs+=("$found"); lib_notes+=("${pattern%%.so*} from $found");
  else lib_notes+=("WARNING: no ${pattern%%.so*} found (PyTorch's nvidia wheels, /usr/local/cuda)"); fi
done
# Only lockstep's binaries run with these (`"${with_libs[@]}" CMD`): PyTorch's reference keeps the machine's
# own libraries (ours are Debian 12's: an older libstdc++ first in its path could break torch).
lib_path="$(IFS=:; echo "${libs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing() { LD_LIBRARY_PATH="$lib_path" ldd "$1" 2>&1 | grep -E "not found"; }
if [[ -d "$dir/lib/fallback" ]] && missing "$gpu_tests" >/dev/null; then
  # The machine's C++ runtime is older than the one lockstep was built with: use the bundle's.
  lib_path="$(cd "$dir/lib/fallback" && pwd):$lib_path"
  lib_notes+=("libstdc++ / libgcc_s: the bundle's (this machine's are older)")
fi
with_libs=(env "LD_LIBRARY_PATH=$lib_path")

say "gpu_check on $(hostname), $(date -u +%FT%TZ), commit $(cat "$dir/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null)"
for note in "${lib_notes[@]}"; do say "$note"; done
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$report"
for b in "$gpu_tests" "$backend_tests" "$gpu_bench" ${cli:+"$cli"}; do
  [[ -x "$b" ]] || continue
  if missing "$b" >/dev/null; then say "ERROR: $(basename "$b") lacks libraries:"; missing "$b" | tee -a "$report"; exit 1; fi
done

count_out="$("${with_libs[@]}" "$gpu_tests" --gtest_filter=NoDevice.ReportsHowManyGpusAreVisible 2>&1)"
gpus="$(grep -m1 'GPUs visible:' <<<"$count_out")"
say "$gpus"
grep -m1 'GPU stack:' <<<"$count_out" | tee -a "$report"
if [[ "${gpus##*: }" == "0" || -z "$gpus" ]]; then
  say "ERROR: lockstep sees no GPU here (driver, CUDA_VISIBLE_DEVICES?); nothing to check"; exit 1
fi

status=0
phase() {  # phase NAME SECONDS CMD...: runs with a limit, logs the tail, records failure
  local name="$1" limit="$2"; shift 2
  say ""; say "==== $name (limit ${limit}s) ===="
  local t0=$SECONDS log="$report_dir/gpu_check_$name.log"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  tail -n 40 "$log" >>"$report"
  tail -n 12 "$log"
  say "---- $name: exit $rc in $((SECONDS - t0))s (full log: $log)"
  [[ $rc -ne 0 ]] && status=1
  return 0
}

# Not --gtest_brief: if a test hangs, the log's last "[ RUN ]" names it.
phase gpu_tests 120 "${with_libs[@]}" "$gpu_tests"
say "4 logical replicas on one GPU vs one device (1e-5):"
grep -E 'FourLogicalReplicas' "$report_dir/gpu_check_gpu_tests.log" | tee -a "$report"
grep -q 'FAILED.*FourLogicalReplicas' "$report_dir/gpu_check_gpu_tests.log" && say "  FAILED" || say "  (not listed as failed above)"
phase parity_cuda 60 "${with_libs[@]}" "$backend_tests" --gtest_brief=1 '--gtest_filter=*cuda*:ParityBackends.Cuda'
# The flagship's and the convnet's test accuracy on MNIST, trained on the GPU by the CLI with the
# CPU suite's settings and thresholds (tests/cli_and_reference_tests.cmake: flagship.*).
if [[ -x "$cli" && -f "$data_dir/mnist/train-images-idx3-ubyte.gz" ]]; then
  export LOCKSTEP_DATA_DIR="$data_dir"
  runs="${TMPDIR:-/tmp}/lockstep-gpu-check-runs"
  rm -rf "$runs"
  phase mlp_accuracy 45 tests/cli/check_metrics.sh 0.975 "${with_libs[@]}" "$cli" train --devices gpu:0 --no-tensorboard \
    --logdir "$runs/mlp"
  # fit's prefetch to device (the next batch copied on the copy stream while a step runs) against
  # copying each batch in order before its step: one epoch of the flagship each.
  phase prefetch_ab 30 bash -c 'runs="$1"; shift; for p in 1 0; do off=(); ((p)) || off=(--no-prefetch-to-device)
      echo "prefetch_to_device=$p: $("$@" "${off[@]}" --epochs 1 --verbose 2 \
        --logdir "$runs/prefetch$p" 2>&1 | grep -o "train_steps_per_second: [0-9.]*")"; done' \
    _ "$runs" "${with_libs[@]}" "$cli" train --devices gpu:0 --no-tensorboard
  # steps_per_execution (issue 37): the loss read once per 8 steps instead of each, batch 64.
  phase steps_per_execution_ab 30 bash -c 'runs="$1"; shift; for n in 1 8; do echo "steps_per_execution=$n: $("$@" --steps-per-execution $n --epochs 1 --verbose 2 --logdir "$runs/spe$n" 2>&1 | grep -o "train_steps_per_second: [0-9.]*")"; done' \
    _ "$runs" "${with_libs[@]}" "$cli" train --devices gpu:0 --no-tensorboard --global-batch-size 64
  phase cnn_accuracy 60 tests/cli/check_metrics.sh 0.99 "${with_libs[@]}" "$cli" train --model cnn --devices gpu:0x2 --epochs 5 \
    --global-batch-size 64 --learning-rate 2e-3 --no-tensorboard --logdir "$runs/cnn"
  # The seeds' custom loop (examples/custom_loop.cpp, every GPU): variables on the GPU from the scope
  # on, model(x_test) on host data after each epoch; >= 0.97 as on emulated GPUs in CI (issue 42).
  phase custom_loop 90 bash -c 'out="$("$@" 5)" || { echo "$out"; exit 1; }; echo "$out"
      acc="$(tail -1 <<<"$out" | sed -n "s/.*Test Accuracy: \([0-9.]*\).*/\1/p")"; awk -v a="$acc" "BEGIN { exit !(a >= 0.97) }"' \
    _ "${with_libs[@]}" "$custom_loop"
  # Weights written from the GPU (.keras and a lockstep folder), read back and run by predict.
  phase save_load 40 tests/gpu/save_and_predict.sh "$runs/save" gpu:0 "$py" "${with_libs[@]}" "$cli"
else
  say ""; say "accuracy runs skipped: no lockstep CLI or no MNIST under $data_dir (scripts/gpu_bundle.sh carries both)"
  status=1
fi
phase gpu_bench 60 "${with_libs[@]}" "$gpu_bench" --json
phase torch_reference 150 "$py" bench/reference_gpu.py --json --budget 90
# The GPU tests again under compute-sanitizer's memcheck (out-of-bounds and misaligned device
# accesses, leaks), where the machine has it; not the convnet's (slow under it). Out-of-memory
# errors from the CUDA API are what the memory tests provoke, so API errors are not reported.
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" ]]; then
  phase memcheck 90 "${with_libs[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --report-api-errors no \
    --print-limit 20 "$gpu_tests" '--gtest_filter=GpuMemory.*:GpuReplicas.*:GpuCompute.*'
else
  say ""; say "memcheck skipped: no compute-sanitizer on this machine"
fi

# ---- ratios ----
# Each prints a JSON line of its figures so far after every part: the last one holds what ran.
ours="$(grep '^{' "$report_dir/gpu_check_gpu_bench.log" 2>/dev/null | tail -n 1)"
theirs="$(grep '^{' "$report_dir/gpu_check_torch_reference.log" 2>/dev/null | tail -n 1)"
say ""; say "==== ratios ===="
"$py" - "$ours" "$theirs" "$report_dir/gpu_check_prefetch_ab.log" <<'PY' | tee -a "$report"
import json, sys
def load(s):
    try:
        return json.loads(s)
    except Exception:
        return {}
ours, theirs = load(sys.argv[1]), load(sys.argv[2])
def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"
def cfg(key):  # which of PyTorch's configurations was the faster (bench/reference_gpu.py)
    return f" [{theirs[key + '_config']}]" if theirs.get(key + "_config") else ""
for b in (64, 1024):
    l = ours.get(f"mlp_b{b}_steps_per_s")
    e, c = theirs.get(f"mlp_b{b}_eager"), theirs.get(f"mlp_b{b}_compile")
    print(f"flagship MLP batch {b:4d}: lockstep {l or 0:8.1f} steps/s; torch eager{cfg(f'mlp_b{b}_eager')} {e or 0:8.1f} "
          f"({ratio(l, e)}, goal >= 1.5x); torch.compile{cfg(f'mlp_b{b}_compile')} {c or 0:8.1f} ({ratio(l, c)})")
lg, one = ours.get("mlp_b1024_4logical_steps_per_s"), ours.get("mlp_b1024_steps_per_s")
print(f"flagship MLP batch 1024 on 4 logical replicas of gpu:0: {lg or 0:8.1f} steps/s = {ratio(lg, one)} one device")
ce, cc = theirs.get("convnet_b128_eager"), theirs.get("convnet_b128_compile")
cl = ours.get("convnet_b128_steps_per_s")
print(f"convnet batch 128: lockstep {cl or 0:8.1f} steps/s; torch eager{cfg('convnet_b128_eager')} {ce or 0:8.1f} "
      f"({ratio(cl, ce)}); torch.compile{cfg('convnet_b128_compile')} {cc or 0:8.1f} ({ratio(cl, cc)})")
for d in ("f32", "bf16", "f16"):
    peak, big = ours.get(f"gemm_{d}_peak_tflops"), ours.get(f"gemm_{d}_b1024_4096_tflops")
    first = ours.get(f"gemm_{d}_b1024_flagship_tflops")
    t = theirs.get(f"torch_gemm_{d}_8192_tflops")
    print(f"GEMM {d:4s}: measured peak {peak or 0:7.1f} TFLOP/s (torch 8192^3: {t or 0:7.1f}); batch 1024 "
          f"1024x4096x4096 {big or 0:7.1f} = {100 * big / peak if big and peak else 0:.0f}% of peak (goal >= 70%); "
          f"flagship layer {first or 0:.1f} = {100 * first / peak if first and peak else 0:.0f}%")
try:
    for line in open(sys.argv[3]):
        if line.startswith("prefetch_to_device="):
            print(f"fit, flagship on gpu:0, one epoch: {line.strip()}")
except OSError:
    pass
bw, cp = ours.get("allreduce_4_logical_busbw_gbs"), ours.get("device_copy_gbs")
# Through device memory an all-reduce of n buffers reads all n and writes all n: 2n bytes moved per
# byte of algorithm bandwidth (bus bandwidth x n / (2 (n - 1))), against a copy's read + write.
traffic = bw * 4 / 6 * 8 if bw else 0
print(f"all-reduce among 4 logical replicas: bus bandwidth {bw or 0:.1f} GB/s; memory traffic {traffic:.0f} GB/s "
      f"(reads and writes) = {100 * traffic / cp if traffic and cp else 0:.0f}% of the device copy's {cp or 0:.0f} GB/s")
PY
say ""
say "gpu_check: $([[ $status -eq 0 ]] && echo "every phase passed" || echo "SOME PHASE FAILED (see above)"); report: $report"
exit $status
