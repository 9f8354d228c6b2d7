#!/usr/bin/env bash
# The one command for a GPU machine (issues 13, 37, 38, 40, 42): every GPU point of the open issues
# in one run of at most --budget seconds (default 540: a device call's 10 minutes leave room for
# the start and the bundle). Runs the gpu tests, the seeds' custom loop, lockstep's bare steps
# (bench/gpu_bench.cpp), `lockstep train` through fit (flagship at 64 / 1024, gpu:0x4, the wide
# MLP in float32 / bfloat16 / float16, the ViT and the GPT), PyTorch at its best
# (bench/reference_gpu.py), the host's CPU scaling (bench/compare_cores.sh), the CUDA parity rows,
# accuracy runs, compute-sanitizer and a profile of one fit run, then prints one
# "ACCEPT <issue>.<point> ratio=... goal=... PASS|FAIL|MISSING what" line per acceptance point
# (scripts/gpu_check_accept.py, which can be rerun on the logs afterwards).
# Made for a machine without a compiler or a package registry (an H200 with a CUDA 13 driver and
# PyTorch 2.11 in its python3): its binaries come from gpu-bundle/ or gpu-bundle.tar.xz
# (scripts/gpu_bundle.sh, run where nvcc is, then carried along), else from build/.
#   scripts/gpu_check.sh [--dry-run | --emulated] [--budget SECONDS] [--only PART,...] [--logs DIR]
#                        [bundle-or-build-dir]
# Writes to $OUT (else the repository): gpu_check_report.txt and gpu_check_logs.tar.gz (every
# part's log and JSON, repacked after each part, so a run cut off keeps what it did).
# A second try within a session's device time: --only runs just the parts named (those that
# failed or were skipped), and --logs DIR adds to an earlier run's logs (its tarball unpacked into
# DIR, carried along) so that the ACCEPT lines cover both runs.
# On the device machine (15 min of device time in all, the start, idle waits and every call
# included; at most 10 min a command): ONE call, `scripts/gpu_check.sh` with timeout_s 600 and
# gpu-bundle.tar.xz carried. The parts that issue 37's points 1-4 and 42.1 read come first, then
# correctness (gpu tests, parity, memcheck); their limits add up to at most the default --budget
# (540 s: the unpacking, the checks before and the acceptance after fit in the call's other 60 s).
# The parts after them (profiles, A/B runs, transformers, accuracy, CPU scaling) run while their
# whole limit fits in what is left of the budget (the limits are worst cases: most parts end far
# sooner). --dry-run shows the plan, each of the call's parts with where it ends if every one
# before it runs to its limit. Where a second call fits, on the still warm machine: --only the
# parts skipped or failed, with --logs the first run's folder (its report names it) and the
# --budget that is left.
# --dry-run (no GPU needed; CI runs it): checks every binary and file exists, every `lockstep
# train` flag is one the CLI knows, the scripts parse, reference_gpu.py's models build and step on
# the CPU and the accept script runs; prints each part's command line; runs nothing on a GPU.
# --emulated (no GPU needed): the whole run on emulated GPUs (LOCKSTEP_EMULATED_GPUS, default 1:
# host memory, the CPU's kernels), so that every part but those only a real GPU serves (PyTorch on
# CUDA, compute-sanitizer, Nsight: skipped, saying so) runs to its end and leaves the logs and JSON
# the accept script reads. Runs are shrunk (emulated() below: `lockstep train` one epoch of at most 30
# steps, 200 where the part sets none, width and batch at most 256, accuracy goals 0.8 where a run
# was shrunk; gpu_bench shrinks itself) and limits are 4x. Its figures are the CPU's: it checks the
# machinery (flags, paths, JSON names, the accept script), not the goals.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
dry=0 emu=0 budget="" dir="" only="" logs=""
emu_steps=30 emu_acc_steps=200 emu_width=256 emu_min=0.8 emu_slack=4
while (($#)); do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --emulated) emu=1; shift ;;
    --budget) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --budget needs seconds" >&2; exit 2; }
              budget="$2"; shift 2 ;;
    --only) [[ -n "${2:-}" ]] || { echo "gpu_check: --only needs part names" >&2; exit 2; }
            only=",$2,"; shift 2 ;;
    --logs) [[ -d "${2:-}" ]] || { echo "gpu_check: --logs needs an existing folder" >&2; exit 2; }
            logs="$(cd "$2" && pwd)"; shift 2 ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    -*) echo "gpu_check: unknown option '$1'" >&2; exit 2 ;;
    *) dir="$1"; shift ;;
  esac
done
if ((emu)); then
  # A real GPU, where there is one, wins over the switch: then this is a real run.
  [[ "${LOCKSTEP_EMULATED_GPUS:-0}" =~ ^[1-8]$ ]] || export LOCKSTEP_EMULATED_GPUS=1
  budget="${budget:-3000}"
fi
budget="${budget:-540}"
report_dir="${OUT:-$repo}"
report="$report_dir/gpu_check_report.txt"
mkdir -p "$report_dir"
if [[ -z "$logs" ]]; then
  logs="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_logs.XXXXXX")"
  ((dry)) && trap 'rm -rf "$logs"' EXIT  # a real run's stay (its report names them) and are packed
fi
runs="$logs/runs"  # run folders of `lockstep train` (not packed)
mkdir -p "$runs"
: >"$report"
say() { printf '%s\n' "$*" | tee -a "$report"; }

# ---- binaries ----
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
[[ -d "$data_dir/mnist" ]] || { [[ -d "$(dirname "$repo")/shared/data/mnist" ]] && data_dir="$(dirname "$repo")/shared/data"; }
text=""  # the GPT's text: the bundle's copy (the GPU machine may lack /usr/share/common-licenses)
if [[ -x "$dir/bin/gpu_tests" ]]; then
  bin="$dir/bin"; gpu_tests="$bin/gpu_tests"; backend_tests="$bin/backend_tests"
  [[ -d "$dir/data/mnist" ]] && data_dir="$(cd "$dir/data" && pwd)"
  [[ -f "$dir/data/text.txt" ]] && text="$(cd "$dir/data" && pwd)/text.txt"
elif [[ -x "$dir/tests/gpu_tests" ]]; then
  bin="$dir/bin"; gpu_tests="$dir/tests/gpu_tests"; backend_tests="$dir/tests/backend_tests"
else
  echo "gpu_check: no gpu_tests under $dir: run scripts/gpu_bundle.sh where nvcc is and carry gpu-bundle/," >&2
  echo "gpu_check: or build here (scripts/build.sh) when this machine has the CUDA toolkit" >&2
  exit 1
fi
gpu_bench="$bin/gpu_bench" cli="$bin/lockstep" custom_loop="$bin/custom_loop" gemm_bench="$bin/gemm_bench"
fit_host_cost="$bin/fit_host_cost" hotpath_bench="$bin/hotpath_bench"
export LOCKSTEP_DATA_DIR="$data_dir"
# The Python that holds PyTorch: $PYTHON, else the first python3 on PATH that imports torch
# (the GPU machine's python3; here Debian's /usr/bin/python3), else python3. Without PyTorch the
# parts that run it (bench/reference_gpu.py) are skipped, naming why, as is one whose PyTorch sees
# no GPU (its exit 77).
py="${PYTHON:-}" torch_here=0
if [[ -z "$py" ]]; then
  for p in python3 /usr/bin/python3; do
    command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null && { py="$(command -v "$p")"; torch_here=1; break; }
  done
  py="${py:-python3}"
else
  "$py" -c 'import torch' 2>/dev/null && torch_here=1
fi

# ---- libraries: the bundle's, then cuBLASLt / cuDNN / NCCL / cudart from PyTorch's wheels or CUDA
# (cuDNN's runtime-compiled engines need NVRTC, which comes from the same place) ----
libs=()
lib_notes=()
[[ -d "$dir/lib" ]] && libs+=("$(cd "$dir/lib" && pwd)")
site="$("$py" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null || true)"
for pattern in 'libcublasLt.so.13*' 'libcudnn.so.9*' 'libnccl.so.2*' 'libcudart.so.13*' 'libnvrtc.so.13*'; do
  found=""
  for root in ${site:+"$site/nvidia" "$site/torch/lib"} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d "$root" ]] || continue
    f="$(find "$root" -name "$pattern" -print -quit 2>/dev/null)"
    if [[ -n "$f" ]]; then found="$(dirname "$f")"; break; fi
  done
  if [[ -n "$found" ]]; then
    [[ " ${libs[*]} " == *" $found "* ]] || libs+=("$found"); lib_notes+=("${pattern%%.so*} from $found")
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

say "gpu_check$( ((dry)) && echo " --dry-run")$( ((emu)) && echo " --emulated (LOCKSTEP_EMULATED_GPUS=$LOCKSTEP_EMULATED_GPUS)") on $(hostname), $(date -u +%FT%TZ), commit $(cat "$dir/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null), budget ${budget}s"
for note in "${lib_notes[@]}"; do say "$note"; done
status=0
# (The plugins too: the CUDA backend's and NCCL's libraries are theirs, loaded where a GPU is.)
for b in "$gpu_tests" "$backend_tests" "$gpu_bench" "$cli" "$custom_loop" "$gemm_bench" "$fit_host_cost" "$hotpath_bench"; do
  if [[ ! -x "$b" ]]; then say "ERROR: $b is missing (scripts/gpu_bundle.sh builds it)"; status=1
  elif ((!dry)) && missing "$b" >/dev/null; then say "ERROR: $(basename "$b") lacks libraries:"; missing "$b" | tee -a "$report"; exit 1; fi
done
for b in "$dir"/lib/liblockstep_*.so; do
  [[ -f "$b" ]] || continue
  if ((!dry)) && missing "$b" >/dev/null; then say "ERROR: $(basename "$b") lacks libraries:"; missing "$b" | tee -a "$report"; exit 1; fi
done
for f in tests/cli/check_metrics.sh tests/gpu/save_and_predict.sh bench/compare_cores.sh bench/reference_gpu.py \
         bench/reference_transformer.py scripts/gpu_check_accept.py "$data_dir/mnist/train-images-idx3-ubyte.gz"; do
  [[ -f "$f" ]] || { say "ERROR: $f is missing"; status=1; }
done
if ((!dry)); then
  ((emu)) && say "nvidia-smi: not asked (--emulated)"
  ((!emu)) && command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$report"
  count_out="$("${with_libs[@]}" "$gpu_tests" --gtest_filter=NoDevice.ReportsHowManyGpusAreVisible 2>&1)"
  gpus="$(grep -m1 'GPUs visible:' <<<"$count_out")"
  say "$gpus"
  grep -m1 'GPU stack:' <<<"$count_out" | tee -a "$report"
  if [[ "${gpus##*: }" == "0" || -z "$gpus" ]]; then
    say "ERROR: lockstep sees no GPU here (driver, CUDA_VISIBLE_DEVICES?); nothing to check"; exit 1
  fi
fi

# ---- how a part runs ----
t_begin=$SECONDS
known=","  # the parts' names, for --only
planned=0  # the limits of the parts selected, against --budget
core=0     # of them, the limits of those before `as_time_allows` (the call's plan)
extra=0    # 1 after `as_time_allows`: a part runs only if its whole limit fits in what is left
train_help=""
pack() { tar -czf "$report_dir/gpu_check_logs.tar.gz" -C "$logs" --exclude=runs --exclude=bin . 2>/dev/null || true; }
part() {  # part NAME LIMIT CMD...: runs CMD within LIMIT seconds and what is left of --budget
  local name="$1" limit="$2"; shift 2
  local left=$((budget - (SECONDS - t_begin))) log="$logs/$name.log"
  known+="$name,"
  [[ -z "$only" || "$only" == *",$name,"* ]] || return 0
  planned=$((planned + limit))
  ((extra)) || core=$planned
  if ((dry)); then
    if ((extra)); then say "DRY $name (limit ${limit}s, as time allows): $*"
    else say "DRY $name (limit ${limit}s, done by ${planned}s at worst$( ((planned > budget)) && echo ": past the budget")): $*"; fi
    local prog; prog="$(program_of "$@")"
    if [[ "$prog" != train && ! -x "$prog" && ! -f "$prog" ]] && ! command -v "$prog" >/dev/null; then
      if [[ "${prog##*/}" == compute-sanitizer ]]; then say "NOTE: $name: no compute-sanitizer here (where a GPU machine lacks it too, the part is skipped)"
      else say "ERROR: $name: '$prog' is not a program here"; status=1; fi
    fi
    [[ "$1" == train ]] && { "$@" || status=1; }
    return 0
  fi
  local gpu_only; gpu_only="$( ((emu)) && real_gpu_only "$@")"
  [[ -n "$gpu_only" ]] && { skipped "$name" "--emulated: $gpu_only needs a real GPU"; return 0; }
  # What the GPU machine may lack is skipped by name, not failed: PyTorch, compute-sanitizer.
  if ((!torch_here)) && [[ " $* " == *"/reference_gpu.py "* ]]; then
    skipped "$name" "reference_gpu.py needs PyTorch, which $py cannot import"; return 0
  fi
  if [[ "$(program_of "$@")" == compute-sanitizer ]] && ! command -v compute-sanitizer >/dev/null; then
    skipped "$name" "no compute-sanitizer on this machine (PATH, /usr/local/cuda/bin)"; return 0
  fi
  if ((emu)); then
    emulated "$@"; set -- "${cmd[@]}"; limit=$((limit * emu_slack))
  fi
  if ((left < 15 || (extra && limit > left))); then
    skipped "$name" "${left}s of the ${budget}s budget left$( ((extra)) && echo ", its limit ${limit}s")"; return 0
  fi
  ((limit > left)) && limit=$left
  say ""; say "==== $name (limit ${limit}s) ===="
  local t0=$SECONDS
  # timeout runs programs: a function of this script (train, ...) runs in a bash of its own.
  declare -F "$1" >/dev/null && set -- bash -c '"$@"' _ "$@"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  tail -n 30 "$log" >>"$report"
  tail -n 8 "$log"
  if ((rc == 77)); then  # the tests' convention: skipped, saying why (reference_gpu.py: PyTorch sees no GPU)
    say "---- $name: SKIPPED (exit 77: $(tail -n 1 "$log")) in $((SECONDS - t0))s"
    printf '%s\tskipped\t%s\n' "$name" "$((SECONDS - t0))" >>"$logs/status.tsv"
    pack
    return 0
  fi
  say "---- $name: exit $rc in $((SECONDS - t0))s"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$logs/status.tsv"
  [[ $rc -ne 0 ]] && status=1
  pack
  return 0
}
as_time_allows() { extra=1; }  # the parts after it run while their limits fit in what is left
skipped() {  # skipped NAME WHY: the part is not run, saying why
  say ""; say "==== $1: SKIPPED ($2)"
  printf '%s\tskipped\t0\n' "$1" >>"$logs/status.tsv"
}
program_of() {  # program_of CMD...: the program a part's CMD runs (past accuracy's MIN, env and its VAR=value words)
  [[ "$1" == accuracy ]] && shift 2
  if [[ "$1" == env ]]; then shift; while [[ "${1:-}" == [A-Za-z_]*=* ]]; do shift; done; fi
  printf '%s' "${1:-}"
}
# train NAME [VAR=VALUE...] FLAGS...: `lockstep train` on MNIST from host memory (through fit); its figures
# (train_steps_per_second, ...) go to NAME.json, and where its time goes (LOCKSTEP_PHASE_TIMES=1:
# fit's loop, and each replica's phases where steps run eagerly) to NAME.log at its end. In a dry
# run: checks each flag against --help.
train() {
  local name="$1" vars=(); shift
  while [[ "${1:-}" =~ ^[A-Z_][A-Z_0-9]*= ]]; do vars+=("$1"); shift; done  # set for this run alone
  if ((dry)); then
    [[ -n "$train_help" ]] || train_help="$("${with_libs[@]}" "$cli" train --help 2>&1)"
    local a ok=0
    for a in "$@"; do  # flags, and the words given as values (model names, policies)
      if [[ "$a" == --* ]]; then
        grep -qE -- "(^|[ ,])${a%%=*}([ ,={]|$)" <<<"$train_help" || { say "ERROR: $name: lockstep train has no $a"; ok=1; }
      elif [[ "$a" =~ ^[a-z][a-z_0-9]*$ ]]; then
        grep -qw -- "$a" <<<"$train_help" || { say "ERROR: $name: lockstep train knows no value '$a'"; ok=1; }
      fi
    done
    return $ok
  fi
  if ((emu)); then emulated train "$@"; set -- "${cmd[@]:1}"; fi
  env "LD_LIBRARY_PATH=$lib_path" LOCKSTEP_PHASE_TIMES=1 "${vars[@]}" "$cli" train "$@" --no-tensorboard --verbose 2 --logdir "$runs/$name" \
    --metrics-out "$logs/$name.json"
}
# accuracy MIN CMD...: CMD's last line says "Test Accuracy: A" with A >= MIN (examples/custom_loop.cpp)
accuracy() {
  local min="$1" out; shift
  out="$("$@")" || { echo "$out"; return 1; }
  echo "$out"
  awk -v a="$(tail -1 <<<"$out" | sed -n 's/.*Test Accuracy: \([0-9.]*\).*/\1/p')" -v m="$min" 'BEGIN { exit !(a >= m) }'
}
# profile: one fit run of the flagship under Nsight Systems where the machine has it (its summary in
# the log; the report file stays behind, too large to bring back), with lockstep's own per-phase
# timers (LOCKSTEP_PHASE_TIMES=1) either way.
profile() {  # profile [DEVICES [TAG]]: gpu:0 by default; TAG names the files of another run
  local nsys=""; ((emu)) || nsys="$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)"
  local devices="${1:-gpu:0}" tag="${2:-}"
  # (An nsys that cannot profile here, as under gVisor, falls back to the timers too.)
  [[ -n "$nsys" ]] && env "LD_LIBRARY_PATH=$lib_path" LOCKSTEP_PHASE_TIMES=1 "$nsys" profile --stats=true -o "$runs/fit_profile$tag" --force-overwrite true \
      "$cli" train --devices "$devices" --global-batch-size 1024 --epochs 1 --steps-per-epoch 500 --no-tensorboard --verbose 2 --logdir "$runs/profile$tag" &&
    return 0
  echo "${nsys:-no nsys}${nsys:+ failed}: lockstep's phase timers"
  train "profile$tag" --devices "$devices" --global-batch-size 1024 --epochs 1 --steps-per-epoch 500
}
# Programs that carry the library path themselves, for scripts that run them beside PyTorch
# (which keeps the machine's own libraries): bench/compare_cores.sh.
wrap() {  # wrap NAME PROGRAM: prints the path of a wrapper that runs PROGRAM with lockstep's libraries
  mkdir -p "$logs/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$lib_path" "$2" >"$logs/bin/$1"
  chmod +x "$logs/bin/$1"; echo "$logs/bin/$1"
}
left_s() {  # left_s MAX RESERVE: MAX, or what is left of the budget less RESERVE if that is less
  local l=$((budget - (SECONDS - t_begin) - $2)); ((l < $1)) && echo $((l > 10 ? l : 10)) || echo "$1"
}
# --emulated: what only a real GPU serves, and the shrunk runs.
real_gpu_only() {  # real_gpu_only CMD...: prints the program of CMD that needs a real GPU, if any
  local a
  for a in "$@"; do
    case "${a##*/}" in compute-sanitizer|nsys|ncu|nvidia-smi|reference_gpu.py) echo "${a##*/}"; return ;; esac
  done
}
emulated() {  # emulated CMD...: sets cmd to CMD shrunk for emulated GPUs (the CPU's speed)
  cmd=()
  local a v prev="" is_train=0 has_steps=0 has_epochs=0 changed=0 cores=0
  for a in "$@"; do
    v="$a"
    case "$prev" in
      --steps-per-epoch) has_steps=1; ((a > emu_steps)) && v=$emu_steps ;;
      --epochs) has_epochs=1; ((a > 1)) && v=1 ;;
      --hidden|--global-batch-size) ((a > emu_width)) && v=$emu_width ;;
    esac
    [[ "$a" == train && ( "$prev" == "$cli" || ${#cmd[@]} -eq 0 ) ]] && is_train=1
    [[ "$v" != "$a" ]] && changed=1
    cmd+=("$v"); prev="$a"
    [[ "${a##*/}" == compare_cores.sh ]] && cores=1
  done
  ((cores)) && cmd+=(-H 128 -n 20 -w 2)  # the flagship only, few steps (its last flags win)
  ((is_train && !has_steps)) && { cmd+=(--steps-per-epoch "$emu_acc_steps"); changed=1; }
  ((is_train && !has_epochs)) && { cmd+=(--epochs 1); changed=1; }
  [[ "${cmd[0]##*/}" =~ ^(accuracy|check_metrics.sh)$ ]] && ((changed)) && cmd[1]=$emu_min
  return 0
}
export -f train accuracy profile emulated
export dry emu emu_steps emu_acc_steps emu_width emu_min lib_path cli logs runs
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo compute-sanitizer)"
# One epoch of N steps (the data repeats): fit times its steps after the first 5% and up to the last
# step, so no epoch-end validation or backup is counted.
wide=(--hidden 4096 --global-batch-size 4096 --epochs 1 --steps-per-epoch 400)

# ---- the parts, in order of value ----
# One line each: part NAME LIMIT_SECONDS CMD...; `train NAME FLAGS` for a fit run whose figures
# scripts/gpu_check_accept.py reads (NAME.json). Add a part as one line here (and its ACCEPT
# line in gpu_check_accept.py). The parts before `as_time_allows` are the one device call's: their
# limits add up to at most the default --budget (--dry-run fails otherwise); those after it run
# while their whole limit fits in what is left. Fit runs are timed over a few seconds of steps
# after their warm-up at the speeds measured on the H200, bare steps and PyTorch's over 1-1.5 s.
# What issue 37's points 1-4 and 42.1 read: lockstep's bare steps (37.1's denominators, 37.2),
# fit at 64 / 1024 / gpu:0x4 (37.1, 37.4), the wide MLP (37.3), PyTorch at its best on those rows
# (37.2, 37.3), the seeds' custom loop (42.1).
part gpu_bench        40 "${with_libs[@]}" "$gpu_bench" --json
part fit_b64          20 train fit_b64 --devices gpu:0 --global-batch-size 64 --epochs 1 --steps-per-epoch 5000
part fit_b1024        20 train fit_b1024 --devices gpu:0 --global-batch-size 1024 --epochs 1 --steps-per-epoch 2000
part fit_b1024_x4     25 train fit_b1024_x4 --devices gpu:0x4 --global-batch-size 1024 --epochs 1 --steps-per-epoch 2000
part wide_f32         20 train wide_f32 --devices gpu:0 "${wide[@]}"
part wide_bf16        20 train wide_bf16 --devices gpu:0 "${wide[@]}" --policy mixed_bfloat16
part wide_f16         20 train wide_f16 --devices gpu:0 "${wide[@]}" --policy mixed_float16
part torch_reference 140 "$py" bench/reference_gpu.py --json --rows mlp,convnet,wide --budget "$(left_s 120 20)" --cap 40
part custom_loop      45 accuracy 0.97 "${with_libs[@]}" "$custom_loop" 5
# Correctness: the gpu tests (37.5 among them), the CUDA parity rows, compute-sanitizer's memcheck
# on a short set (API errors are what the memory tests provoke), labels and token ids out of range on
# the device among them (mark_outside: the kernels that take them touch nothing outside memory), and
# a captured graph's replays with the multi-tensor Adam's and RMSprop's pointers in its launch parameters.
# Not --gtest_brief: if a test hangs, the log's last "[ RUN ]" names it.
part gpu_tests        90 "${with_libs[@]}" "$gpu_tests"
part parity_cuda      30 "${with_libs[@]}" "$backend_tests" --gtest_brief=1 '--gtest_filter=*cuda*:ParityBackends.Cuda'
part memcheck         45 "${with_libs[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --report-api-errors no \
                         --print-limit 20 "$gpu_tests" '--gtest_filter=GpuMemory.*:GpuCompute.*:GpuReplicas.CollectivesAmongLogicalReplicasOnOneGpu:GpuDeviceChecks.*:GpuKernelLaunches.AdamOverSeveral*:GpuKernelLaunches.RmspropOverSeveral*:GpuStepGraph.Replays*:GpuFusedKernels.*'
as_time_allows
# The block-shared kernels written since the last real run (attention's tiles and reduction trees,
# the device range check's, the fused accuracy's warps) under compute-sanitizer's racecheck and synccheck.
shared_kernels='--gtest_filter=GpuCompute.DropoutAndAttention*:GpuCompute.AttentionOverHeadsWider*:GpuDeviceChecks.AnEagerOp*:GpuFusedKernels.*'
part racecheck        30 "${with_libs[@]}" "$sanitizer" --tool racecheck --error-exitcode 1 --report-api-errors no \
                         --print-limit 20 "$gpu_tests" "$shared_kernels"
part synccheck        20 "${with_libs[@]}" "$sanitizer" --tool synccheck --error-exitcode 1 --report-api-errors no \
                         --print-limit 20 "$gpu_tests" "$shared_kernels"
# Where fit's time goes under Nsight Systems (every fit run above prints lockstep's phase times).
part profile          45 profile
# Logical replicas on their own streams (issue 37.4): where gpu:0x4's step goes (streams overlapping?).
part profile_x4       45 profile gpu:0x4 _x4
part fit_b64_spe8     20 train fit_b64_spe8 --devices gpu:0 --global-batch-size 64 --epochs 1 --steps-per-epoch 5000 --steps-per-execution 8
# fit reading each step's numbers (a device sync per step) against fit_b64's reads once per 16
# steps (every callback of lockstep train's is async-safe; issue 37.1; INFO).
part fit_b64_sync     20 train fit_b64_sync LOCKSTEP_SYNC_EACH_STEP=1 --devices gpu:0 --global-batch-size 64 --epochs 1 --steps-per-epoch 5000
# An accumulation group of 4 batches of 64, every batch replayed (issue 37; INFO against fit_b64:
# before, every batch after a group's first ran eagerly).
part fit_b64_accum4   20 train fit_b64_accum4 --devices gpu:0 --global-batch-size 64 --epochs 1 --steps-per-epoch 5000 --gradient-accumulation-steps 4
part prefetch_off     20 train prefetch_off --devices gpu:0 --global-batch-size 64 --epochs 1 --steps-per-epoch 5000 --no-prefetch-to-device
# The same at global batch 1024 (against fit_b1024), where the input path is most of a step.
part prefetch_off_1024 20 train prefetch_off_1024 --devices gpu:0 --global-batch-size 1024 --epochs 1 --steps-per-epoch 2000 --no-prefetch-to-device
# fit's host cost at batch 1024 with the next batch gathered by the input worker (1) or by the
# replica's thread (0), interleaved segments against the bare step (issue 37.1; INFO); and with
# the rows gathered into host memory, then copied into the pinned block (--staging 0: the copy
# that gathering straight into the block saves).
part host_cost_ahead  40 "${with_libs[@]}" "$fit_host_cost" --batch 1024 --steps 1000 --rounds 3 --gather-ahead 1
part host_cost_inline 40 "${with_libs[@]}" "$fit_host_cost" --batch 1024 --steps 1000 --rounds 3 --gather-ahead 0
part host_cost_unstaged 40 "${with_libs[@]}" "$fit_host_cost" --batch 1024 --steps 1000 --rounds 3 --staging 0
# At batch 64, fit reading once per 16 steps against reading each step ("fit/1, read each").
part host_cost_reads  40 "${with_libs[@]}" "$fit_host_cost" --batch 64 --steps 2000 --rounds 3 --read-each 1
# The host's ns per launch's count, error site, kept constant and read on gpu:0 and gpu:0x4's
# replica threads (issue 37; INFO).
part hotpath          20 "${with_libs[@]}" "$hotpath_bench" --calls 20000 --rounds 5
# The transformers through fit against PyTorch's (issue 40.5).
part torch_transformers 90 "$py" bench/reference_gpu.py --json --rows vit,gpt --budget "$(left_s 70 20)" --cap 30 ${text:+--text "$text"}
part vit              40 train vit --model vit --devices gpu:0 --global-batch-size 128 --epochs 1 --steps-per-epoch 300
part gpt              40 train gpt --model gpt ${text:+--text "$text"} --devices gpu:0 --global-batch-size 64 --epochs 1 --steps-per-epoch 300
# The convnet's peak device memory under float32 and mixed_bfloat16 (issue 42's point 5; INFO).
part cnn_mem_f32      25 train cnn_mem_f32 --model cnn --devices gpu:0 --global-batch-size 128 --epochs 1 --steps-per-epoch 50
part cnn_mem_bf16     25 train cnn_mem_bf16 --model cnn --devices gpu:0 --global-batch-size 128 --epochs 1 --steps-per-epoch 50 --policy mixed_bfloat16
# With cnn_mem_*: the convnet's steps/s with cuDNN's 16-bit convolutions (float16 beside bfloat16; INFO).
part cnn_f16          25 train cnn_f16 --model cnn --devices gpu:0 --global-batch-size 128 --epochs 1 --steps-per-epoch 50 --policy mixed_float16
part mlp_accuracy     45 tests/cli/check_metrics.sh 0.975 "${with_libs[@]}" "$cli" train --devices gpu:0 --no-tensorboard --logdir "$runs/mlp"
part cnn_accuracy     60 tests/cli/check_metrics.sh 0.99 "${with_libs[@]}" "$cli" train --model cnn --devices gpu:0x2 --epochs 5 \
                         --global-batch-size 64 --learning-rate 2e-3 --no-tensorboard --logdir "$runs/cnn"
part save_load        40 tests/gpu/save_and_predict.sh "$runs/save" gpu:0 "$py" "${with_libs[@]}" "$cli"
part cores           120 env LOCKSTEP_BIN="$(wrap lockstep "$cli")" GEMM_BENCH_BIN="$(wrap gemm_bench "$gemm_bench")" \
                         REF_PYTHON="$py" bench/compare_cores.sh -R 1 -n 100 -w 10 --json

IFS=, read -ra wanted <<<"${only#,}"
for w in "${wanted[@]}"; do
  [[ "$known" == *",$w,"* ]] || { say "ERROR: --only: no part is named '$w' (the parts: ${known:1:-1})"; status=1; }
done

say ""
say "budget: the call's parts plan ${core}s of --budget ${budget}s (${planned}s with those run as time allows)$( ((!dry)) && echo "; they took $((SECONDS - t_begin))s")"
((planned > budget)) && say "  (a part whose limit no longer fits is skipped, saying so: where a second call fits, rerun it with --only PART --logs DIR)"
if ((dry && core > budget)) && [[ -z "$only" ]]; then
  say "ERROR: the parts before as_time_allows need ${core}s, more than --budget ${budget}s: one device call cannot hold them"
  status=1
fi

# ---- acceptance ----
say ""; say "==== acceptance (scripts/gpu_check_accept.py $logs) ===="
if ((dry)); then
  bash -n bench/compare_cores.sh && bash -n tests/gpu/save_and_predict.sh || status=1
  "$py" -m py_compile bench/reference_gpu.py scripts/gpu_check_accept.py || status=1
  "$py" bench/reference_gpu.py --dry-run 2>&1 | tee -a "$report"
  rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 || $rc -eq 3 ]] || status=1  # 3: no torch here, nothing of it to check
fi
accept_flags=(); ((emu)) && accept_flags=(--emulated)
"$py" scripts/gpu_check_accept.py "${accept_flags[@]}" "$logs" | tee -a "$report"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
pack
say ""
say "gpu_check: $([[ $status -eq 0 ]] && echo "every part passed" || echo "SOME PART FAILED (see above)"); report: $report"
exit $status
