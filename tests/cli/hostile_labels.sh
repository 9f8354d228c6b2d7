#!/usr/bin/env bash
# hostile_labels.sh LOCKSTEP CASE : --data files whose labels or path would size or break a run
# (issue 41, items 7 and 10); each CASE is one ctest entry (cli.hostile_labels.CASE). Passes
# when lockstep refuses (status 2 for labels a flag can allow, 1 for a path that is no file)
# with a message naming the file and the problem, in seconds.
set -uo pipefail
cli="$1"; case="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
expect() { timeout 60 "$here/expect.sh" "$@" || exit 1; }
base=(train --batch-size 2 --devices cpu:1 --verbose 0 --no-tensorboard --epochs 1 --steps-per-epoch 1)
# npz FILE Y_TEST Y_TRAIN... : four arrays (2x2 uint8 pixels), y_test = [0, Y_TEST] and y_train as given, written
# without numpy (the .npy header by hand) so that the test needs only python3.
npz() {
  python3 - "$@" <<'PY' || { echo "FAIL: could not write $1"; exit 1; }
import struct, sys, zipfile
path, last, labels = sys.argv[1], int(sys.argv[2]), [int(v) for v in sys.argv[3:]]
def npy(descr, shape, data):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join("%d," % d for d in shape))
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + data
n = len(labels)
with zipfile.ZipFile(path, "w") as z:
    z.writestr("x_train.npy", npy("|u1", (n, 2, 2), bytes(range(4 * n))))
    z.writestr("y_train.npy", npy("<i8", (n,), struct.pack("<%dq" % n, *labels)))
    z.writestr("x_test.npy", npy("|u1", (2, 2, 2), bytes(8)))
    z.writestr("y_test.npy", npy("<i8", (2,), struct.pack("<2q", 0, last)))
PY
}

case "$case" in
huge_label)  # one label of 3,000,000 would build Dense(128, 3000001): refused, the flag named
  npz "$work/huge.npz" 1 0 1 3000000 1
  expect 2 "huge.npz': y_train\[2\] is 3000000, which would make a model of 3000001 classes.*--num-classes" \
    "$cli" "${base[@]}" --data "$work/huge.npz" --logdir "$work/run"
  [[ ! -e "$work/run" ]] || { echo "FAIL: the run directory was made before the labels were checked"; exit 1; }
  ;;
num_classes)  # --num-classes: every label must be below it; with it, more classes than labels train
  npz "$work/d.npz" 1 0 1 7 1
  expect 2 "d.npz': y_train\[2\] is 7, outside --num-classes 5" \
    "$cli" "${base[@]}" --data "$work/d.npz" --num-classes 5 --logdir "$work/run5"
  expect 0 "test_loss" "$cli" "${base[@]}" --data "$work/d.npz" --num-classes 12 --logdir "$work/run12"
  expect 2 "--num-classes" "$cli" "${base[@]}" --data "$work/d.npz" --num-classes 1 --logdir "$work/run1"
  ;;
evaluate_label)  # evaluate: a label the model has no output for is refused, as Keras does
  npz "$work/d.npz" 1 0 1 1 0
  npz "$work/e.npz" 5 0 1 1 0
  expect 0 "test_loss" "$cli" "${base[@]}" --data "$work/d.npz" --logdir "$work/run" --save-model "$work/m.keras"
  expect 2 "e.npz': y_test\[1\] is 5 but the model in '$work/m.keras' has 2 classes" \
    "$cli" evaluate --model "$work/m.keras" --data "$work/e.npz"
  ;;
data_directory)  # --data naming a folder or a device: the path and what it is, not a stream error
  expect 1 "read_npz: '$work': is a directory, not an .npz file" \
    "$cli" "${base[@]}" --data "$work" --logdir "$work/run"
  expect 1 "read_npz: '/dev/zero': is not a regular file" "$cli" "${base[@]}" --data /dev/zero --logdir "$work/run"
  ;;
*) echo "unknown case $case"; exit 2 ;;
esac
