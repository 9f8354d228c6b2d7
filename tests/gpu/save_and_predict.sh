#!/usr/bin/env bash
# A model trained on a GPU, saved, loaded and run: scripts/gpu_check.sh's save_load phase, and in
# CI on an emulated GPU (ctest's gpu.emulated_save_and_predict, LOCKSTEP_EMULATED_GPUS=1).
#   tests/gpu/save_and_predict.sh DIR DEVICES PYTHON CMD...   (CMD: the lockstep CLI, maybe behind env)
# Trains the flagship for 200 steps on DEVICES (e.g. gpu:0), saves it as DIR/m.keras and as a
# lockstep folder (DIR/run/model), then `lockstep predict`s the first 100 MNIST test images ($LOCKSTEP_DATA_DIR,
# else ~/.lockstep/datasets) with each (PYTHON, the standard library alone, writes them as .npy).
# Passes when both give the same classes, most of them right, and the probabilities sum to 1.
set -euo pipefail
dir="$1" devices="$2" py="$3"; shift 3
data="${LOCKSTEP_DATA_DIR:-$HOME/.lockstep/datasets}"  # where lockstep looks (scripts/setup.sh)
rm -rf "$dir" && mkdir -p "$dir"
"$py" - "$data/mnist" "$dir" <<'PY'
import gzip, sys
src, out = sys.argv[1], sys.argv[2]
with gzip.open(f"{src}/t10k-images-idx3-ubyte.gz") as f:
    f.read(16)
    pixels = f.read(100 * 784)
header = "{'descr': '|u1', 'fortran_order': False, 'shape': (100, 28, 28), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"  # the whole preamble a multiple of 64 bytes
with open(f"{out}/images.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + pixels)
with gzip.open(f"{src}/t10k-labels-idx1-ubyte.gz") as f:
    f.read(8)
    open(f"{out}/labels.txt", "w").write(" ".join(str(b) for b in f.read(100)))
PY
# One run writes both: the .keras file asked for, and the lockstep folder every run saves in its logdir.
"$@" train --devices "$devices" --epochs 1 --steps-per-epoch 200 --no-tensorboard --verbose 0 --logdir "$dir/run" \
  --save-model "$dir/m.keras"
"$@" predict --model "$dir/m.keras" --input "$dir/images.npy" --output "$dir/p.npy"
"$@" predict --model "$dir/run/model" --input "$dir/images.npy" > "$dir/classes.txt"
"$py" - "$dir" <<'PY'
import ast, struct, sys
d = sys.argv[1]
raw = open(f"{d}/p.npy", "rb").read()
n = int.from_bytes(raw[8:10], "little")
header = ast.literal_eval(raw[10:10 + n].decode())
assert header["descr"] == "<f4" and header["shape"] == (100, 10), header
values = struct.unpack("<1000f", raw[10 + n:])
rows = [values[10 * i:10 * i + 10] for i in range(100)]
labels = [int(v) for v in open(f"{d}/labels.txt").read().split()]
classes = [int(line) for line in open(f"{d}/classes.txt") if line.strip()]
assert all(abs(sum(r) - 1) < 1e-5 for r in rows), [sum(r) for r in rows[:5]]
assert classes == [max(range(10), key=r.__getitem__) for r in rows], "the .keras file and the folder predict different classes"
right = sum(c == l for c, l in zip(classes, labels))
assert right >= 80, f"only {right} of 100 right"
print(f"ok: saved from the training devices, loaded and run: {right} of 100 test images right, the same classes both ways")
PY
