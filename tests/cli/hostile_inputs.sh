#!/usr/bin/env bash
# hostile_inputs.sh LOCKSTEP SAVED_MODEL_FIXTURE_DIR CASE : one class of adversarial input
# (edited files, hostile flags, faults) driven through the CLI; each CASE is one ctest entry
# (cli.hostile.CASE). Passes when lockstep refuses it with the right exit status and a message
# naming the problem, and nothing outside the run directory is touched.
set -uo pipefail
cli="$1"; saved="$2"; case="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
# (kill only a pid that was set: "kill -9 0" would kill the whole process group, ctest included)
trap '[[ -n "${bg:-}" ]] && kill -9 "$bg" 2>/dev/null; rm -rf "$work"' EXIT
expect() { "$here/expect.sh" "$@" || exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
# A short real run (2 steps, one device) whose run directory the cases then edit.
base=(train --batch-size 8 --devices cpu:1 --verbose 0 --no-tensorboard)
quick=("${base[@]}" --steps-per-epoch 2)
first_run() { "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run" "$@" >/dev/null || fail "the first run failed"; }
# subst FILE REGEX REPLACEMENT: the first match replaced (python: a 200 kB replacement is too
# long for sed's command line); "DEEP" in REPLACEMENT stands for a 100,000-deep array.
subst() {
  python3 - "$@" <<'PY' || fail "subst $2 in $1"
import re, sys
path, pattern, repl = sys.argv[1:4]
repl = repl.replace("DEEP", "[" * 100000 + "]" * 100000)
text = open(path).read()
new, n = re.subn(pattern, lambda m: repl, text, count=1)
if n != 1: sys.exit("no match for %r in %s" % (pattern, path))
open(path, "w").write(new)
PY
}

case "$case" in
deep_json)  # a 100,000-deep array in model.json, in the backup record and in the pointer file
  cp -r "$saved/model" "$work/model"
  subst "$work/model/model.json" '"format_version": 1' '"format_version": DEEP'
  expect 1 "model.json' is not valid JSON: arrays and objects are nested deeper than 64" \
    "$cli" evaluate --model "$work/model"
  expect 1 "model.json' is not valid JSON: arrays and objects are nested deeper than 64" \
    "$cli" predict --model "$work/model" --input "$saved/images.npy"
  first_run
  cp "$work/run/backup/checkpoint" "$work/pointer"
  subst "$work/run/backup/checkpoint" '"all": \[' '"all": [DEEP, '
  expect 1 "backup/checkpoint' is not valid JSON: arrays and objects are nested deeper than 64" \
    "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run" --resume
  cp "$work/pointer" "$work/run/backup/checkpoint"
  record="$(ls "$work"/run/backup/backup-*.json | tail -1)"
  subst "$record" '"epoch": [0-9]+' '"epoch": DEEP'
  expect 1 "$(basename "$record")' is not valid JSON: arrays and objects are nested deeper than 64" \
    "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run" --resume
  ;;
pointer_escape)  # backup/checkpoint edited to list "../../victim": clean-up must not delete it
  first_run
  echo keep >"$work/victim.json"; echo keep >"$work/victim.safetensors"
  subst "$work/run/backup/checkpoint" '"all": \[' '"all": ["../../victim", '
  # Two more epochs save two more backups, so the oldest listed name would be cleaned up.
  expect 1 "backup/checkpoint' names '../../victim', which is not a file name inside" \
    "$cli" "${quick[@]}" --epochs 3 --logdir "$work/run" --resume
  [[ -f "$work/victim.json" && -f "$work/victim.safetensors" ]] || fail "files outside the run directory were deleted"
  ;;
device_count)  # one upper bound for --devices cpu:N (train, bench) and LOCKSTEP_CPU_DEVICES
  expect 2 "--devices cpu:N needs N in \[1, 1024\], got 'cpu:40000'" "$cli" train --devices cpu:40000
  expect 2 "--devices must be cpu:N with N in \[1, 1024\], got 'cpu:40000'" "$cli" bench allreduce --devices cpu:40000
  expect 2 "LOCKSTEP_CPU_DEVICES='40000' is not a device count in \[1, 1024\]" \
    env LOCKSTEP_CPU_DEVICES=40000 "$cli" bench allreduce
  # A GPU memory limit where the replicas are CPU devices is refused, not ignored.
  expect 2 "--gpu-memory-limit applies to GPU replicas; this run trains on CPU devices \(cpu:0" \
    "$cli" train --devices cpu:1 --gpu-memory-limit 64 --epochs 1 --steps-per-epoch 1 --verbose 0 --no-tensorboard \
    --logdir "$work/run"
  expect 2 "--gpu-memory-limit: must be a finite positive number, got '-1'" "$cli" train --gpu-memory-limit -1
  ;;
thread_start_failure)  # replica threads that cannot be created: reported, never std::terminate
  (ulimit -v 2000000
   "$here/expect.sh" 1 "cannot start the thread of replica [0-9]+: .*\(1000 replicas asked for, [0-9]+ started\)" \
     "$cli" train --devices cpu:1000 --epochs 1 --steps-per-epoch 1 --verbose 0 --no-tensorboard --logdir "$work/run") ||
    exit 1
  ;;
nonfinite_flags)  # inf, 1e309 (overflows to inf) and nan hyper-parameters are refused at the flag
  for v in inf 1e309 nan -inf; do
    expect 2 "--learning-rate: must be a finite positive number, got '$v'" "$cli" train --learning-rate "$v"
  done
  for v in nan inf 1 -0.5; do
    expect 2 "--dropout: must be a number in \[0, 1\), got '$v'" "$cli" train --dropout "$v"
  done
  ;;
nan_loss)  # a run whose loss becomes NaN ends with a clear non-zero exit and saves no model
  expect 1 "training diverged: the loss became NaN or infinite at epoch 1, batch [0-9]+" \
    "$cli" "${base[@]}" --epochs 1 --steps-per-epoch 20 --optimizer sgd --learning-rate 1e30 --logdir "$work/run"
  [[ ! -e "$work/run/model" ]] || fail "a diverged run saved a model"
  ;;
state_edit)  # the backup's training state edited ("iterations": -1 trained to NaN with status 0)
  first_run
  record="$(ls "$work"/run/backup/backup-*.json | tail -1)"
  subst "$record" '"iterations": [0-9]+' '"iterations": -1'
  expect 1 "$(basename "$record")': the record's CRC-32C is .* \(the record was edited or is corrupt\)" \
    "$cli" "${quick[@]}" --epochs 2 --logdir "$work/run" --resume
  ;;
resume_mismatch)  # --resume with other flags mixed old and new values; a pointer listing nothing started afresh
  first_run
  resume=("$cli" "${base[@]}" --logdir "$work/run" --resume)
  expect 2 "was made with other flags: --learning-rate 0.001 \(now 0.01\), --optimizer adam \(now sgd\)" \
    "${resume[@]}" --steps-per-epoch 2 --epochs 1 --learning-rate 0.01 --optimizer sgd
  expect 2 "--batch-size global batch 8 \(now global batch 16\)" "${resume[@]}" --steps-per-epoch 2 --epochs 1 --global-batch-size 16
  expect 2 "--steps-per-epoch 2 \(now 3\)" "${resume[@]}" --steps-per-epoch 3 --epochs 1
  for flag in "--dataset fashion_mnist" "--activation tanh" "--dropout 0.5" "--hidden 64" "--seed 5"; do
    # shellcheck disable=SC2086
    expect 2 "other flags: ${flag%% *} " "${resume[@]}" --steps-per-epoch 2 --epochs 1 $flag
  done
  expect 0 "Resuming with --epochs 2 \(the run was started with --epochs 1\)" \
    "${resume[@]}" --steps-per-epoch 2 --epochs 2
  printf '{"all": [], "latest": "", "next_number": 9}' >"$work/run/backup/checkpoint"
  expect 1 "--resume: '.*backup/checkpoint' lists no backup" "${resume[@]}" --steps-per-epoch 2 --epochs 2
  ;;
output_write_failure)  # a full disk (LOCKSTEP_INJECT_ENOSPC) or an unreplaceable target is a non-zero exit
  expect 1 "cannot write '$work/m.json': write failed: No space left on device" \
    env LOCKSTEP_INJECT_ENOSPC="$work/m.json" "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run" --metrics-out "$work/m.json"
  [[ ! -e "$work/m.json" ]] || fail "a failed write left $work/m.json"
  ! ls -a "$work" | grep -q 'tmp\.' || fail "a failed write left its temporary file"
  expect 1 "No space left on device" env LOCKSTEP_INJECT_ENOSPC="$work/e.json" \
    "$cli" evaluate --model "$saved/model" --metrics-out "$work/e.json"
  expect 1 "No space left on device" env LOCKSTEP_INJECT_ENOSPC="$work/p.npy" \
    "$cli" predict --model "$saved/model" --input "$saved/images.npy" --output "$work/p.npy"
  # /dev/full cannot be renamed onto (that would replace the device node): refused up front.
  expect 1 "--metrics-out '/dev/full' cannot be written: it exists and is not a regular file" \
    "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run2" --metrics-out /dev/full
  [[ -c /dev/full ]] || fail "/dev/full is no longer a device"
  ;;
output_path_checked_first)  # --metrics-out into a missing directory failed only after the training
  expect 1 "--metrics-out '$work/missing/m.json' cannot be written: its directory '$work/missing': No such file" \
    "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run" --metrics-out "$work/missing/m.json"
  [[ ! -e "$work/run" ]] || fail "the run started before its output path was checked"
  expect 1 "--output '$work/missing/p.npy' cannot be written" \
    "$cli" predict --model "$saved/model" --input "$saved/images.npy" --output "$work/missing/p.npy"
  expect 1 "--metrics-out '$work' cannot be written: it exists and is not a regular file" \
    "$cli" evaluate --model "$saved/model" --metrics-out "$work"
  ;;
empty_dataset)  # valid IDX files holding 0 images: an error naming the file and the count
  real="${LOCKSTEP_DATA_DIR:-$HOME/.lockstep/datasets}/mnist"
  for split in train t10k; do
    rm -rf "$work/data"; mkdir -p "$work/data/mnist"
    ln -s "$real"/* "$work/data/mnist/"
    rm -f "$work/data/mnist/$split"-*
    python3 - "$work/data/mnist/$split" <<'PY'
import struct, sys
open(sys.argv[1] + "-images-idx3-ubyte", "wb").write(bytes([0, 0, 8, 3]) + struct.pack(">III", 0, 28, 28))
open(sys.argv[1] + "-labels-idx1-ubyte", "wb").write(bytes([0, 0, 8, 1]) + struct.pack(">I", 0))
PY
    expect 1 "MNIST: '$work/data/mnist/$split-images-idx3-ubyte' holds 0 images" \
      env LOCKSTEP_DATA_DIR="$work/data" "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run-$split"
  done
  expect 1 "MNIST: '$work/data/mnist/t10k-images-idx3-ubyte' holds 0 images" \
    env LOCKSTEP_DATA_DIR="$work/data" "$cli" evaluate --model "$saved/model"
  ;;
concurrent_runs)  # two runs at once on one --logdir: the second is refused naming the first's pid
  "$cli" "${base[@]}" --epochs 1 --steps-per-epoch 1000000 --logdir "$work/run" >"$work/first.log" 2>&1 &
  bg=$!
  for _ in $(seq 600); do grep -q "^$bg$" "$work/run/lockstep.lock" 2>/dev/null && break; sleep 0.1; done
  grep -q "^$bg$" "$work/run/lockstep.lock" || { cat "$work/first.log"; fail "the first run never took its lock"; }
  expect 1 "run directory '$work/run' is in use by process $bg" "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run"
  kill -9 "$bg"; wait "$bg" 2>/dev/null
  # Killed, it holds nothing: the kernel released its lock (stale pid in the file or not).
  expect 0 "test_accuracy" "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run"
  ;;
stale_temporaries)  # killed writes left temporaries forever; a run removes its own, and only where it writes
  first_run --backup-every-steps 1
  dead="$(bash -c 'echo $$')"  # that shell has exited: no process has this pid now
  touch "$work/run/backup/backup-7.json.tmp.$dead" "$work/run/backup/backup-7.safetensors.tmp.$dead" \
    "$work/run/model.json.lockstep-tmp.$dead"
  # A user's files that only look like temporaries: kept (the sweep walked the whole --logdir).
  mkdir -p "$work/run/notes" "$work/outside"
  touch "$work/run/notes/draft.tmp.$dead" "$work/run/draft.tmp.$dead" "$work/run/notes/n.lockstep-tmp.$dead" \
    "$work/outside/o.tmp.$dead"
  ln -s "$work/outside" "$work/run/best"  # a symlinked lockstep folder is not followed
  expect 0 "Removed 3 temporary file\(s\) left in $work/run by killed runs" \
    "$cli" "${quick[@]}" --epochs 2 --logdir "$work/run" --resume
  ! ls -a "$work/run/backup" | grep -q 'tmp\.' || fail "stale temporaries are still there"
  [[ ! -e "$work/run/model.json.lockstep-tmp.$dead" ]] || fail "lockstep's own stale temporary is still there"
  for f in run/notes/draft.tmp.$dead run/draft.tmp.$dead run/notes/n.lockstep-tmp.$dead outside/o.tmp.$dead; do
    [[ -f "$work/$f" ]] || fail "the sweep deleted $f, which lockstep did not write"
  done
  ;;
lock_file)  # lockstep.lock planted as a symlink (a run truncated its target) or a FIFO (no hang)
  mkdir -p "$work/run"; echo "keep me" >"$work/victim"
  ln -s "$work/victim" "$work/run/lockstep.lock"
  expect 1 "cannot lock run directory '$work/run': '$work/run/lockstep.lock' is a symbolic link" \
    "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run"
  [[ "$(cat "$work/victim")" == "keep me" ]] || fail "the symlink's target was written"
  rm "$work/run/lockstep.lock"; mkfifo "$work/run/lockstep.lock"
  expect 1 "'$work/run/lockstep.lock' is not a regular file" \
    timeout 60 "$cli" "${quick[@]}" --epochs 1 --logdir "$work/run"
  ;;
nonfinite_data)  # a NaN or an infinity in --data trained and exited 0 with a NaN test loss
  for bad in "x_test:nan" "x_train:inf"; do
    python3 - "$work/bad.npz" "${bad%%:*}" "${bad##*:}" <<'PY' || fail "writing the .npz"
import io, struct, sys, zipfile
path, array, value = sys.argv[1:4]
def npy(descr, fmt, shape, values):  # a .npy file without numpy: header, then the raw values
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(shape))
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(fmt, *values)
x = {"x_train": [(i % 7) / 7 for i in range(64 * 8)], "x_test": [(i % 5) / 5 for i in range(16 * 8)]}
x[array][3 * 8 + 5] = float(value)
with zipfile.ZipFile(path, "w") as z:
    for name, n in (("train", 64), ("test", 16)):
        z.writestr("x_%s.npy" % name, npy("<f4", "<%df" % (n * 8), (n, 8), x["x_" + name]))
        z.writestr("y_%s.npy" % name, npy("|u1", "%dB" % n, (n,), [i % 2 for i in range(n)]))
PY
    expect 2 "--data '$work/bad.npz': ${bad%%:*} holds a non-finite value \(${bad##*:}\) at element 29" \
      "$cli" "${quick[@]}" --epochs 1 --data "$work/bad.npz" --logdir "$work/run-${bad%%:*}"
    [[ ! -e "$work/run-${bad%%:*}" ]] || fail "the run started before the data was checked"
  done
  ;;
flag_values)  # values that used to wrap, truncate or crash are refused with their reason
  # 1e-300 MiB became 0 bytes, "no limit"; 2^62 steps x 2 epochs overflowed the cosine schedule.
  expect 2 "--gpu-memory-limit 1e-300 MiB is less than 1 MiB \(0 would mean no limit\)" \
    "$cli" train --gpu-memory-limit 1e-300
  expect 2 "--steps-per-epoch 4611686018427387904 x --epochs 2 is more than 2\^53 steps" \
    "$cli" train --steps-per-epoch 4611686018427387904 --epochs 2 --lr-schedule cosine
  expect 2 "--seed: must be an integer in \[0, 2\^64 - 1\], got '-1'" "$cli" train --seed -1
  expect 2 "--seed: must be an integer in \[0, 2\^64 - 1\], got '18446744073709551616'" \
    "$cli" train --seed 18446744073709551616
  expect 2 "--batch-size 4611686018427387904 x 2 replicas overflows 64 bits" \
    "$cli" train --batch-size 4611686018427387904 --devices cpu:2
  expect 2 "\(784, 4611686018427387904\): the number of elements overflows 64 bits" \
    "$cli" "${quick[@]}" --epochs 1 --hidden 4611686018427387904 --logdir "$work/run1"
  # Too big for the machine: the bytes asked are named (under a sanitizer malloc may return null).
  expect 1 "Tensor::empty \(784, 1000000000000\) float32 on cpu:0: cannot allocate 3136000000000000 bytes \\(2.8 PiB\\)" \
    env ASAN_OPTIONS=allocator_may_return_null=1 TSAN_OPTIONS=allocator_may_return_null=1 \
    "$cli" "${quick[@]}" --epochs 1 --hidden 1000000000000 --logdir "$work/run2"
  ;;
file_values)  # a saved model's version past 32 bits; empty and malformed .npy inputs
  cp -r "$saved/model" "$work/model"
  subst "$work/model/model.json" '"format_version": 1' '"format_version": 4294967297'
  expect 1 "format version 4294967297 is not the supported version 1" "$cli" evaluate --model "$work/model"
  python3 - "$work" <<'PY'
import sys
def npy(path, header):
    h = (header + " " * 64)[:118 - 10] + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + bytes([len(h), 0]) + h.encode())
npy(sys.argv[1] + "/empty.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 28, 28), }")
npy(sys.argv[1] + "/bad.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, x), }")
PY
  expect 2 "empty.npy' has shape \(0, 28, 28\): it holds no examples to predict" \
    "$cli" predict --model "$saved/model" --input "$work/empty.npy"
  out="$("$cli" predict --model "$saved/model" --input "$work/bad.npy" 2>&1)" && fail "a bad header was read"
  last="$(printf '%s\n' "$out" | tail -1)"
  [[ "$last" == "error: "*"bad.npy"*"cannot parse the .npy header: "*"(header: "* ]] ||
    fail "the reason is not on the error's own (last) line: $out"
  ;;
*)
  fail "unknown case '$case'"
  ;;
esac
echo "ok: $case"
