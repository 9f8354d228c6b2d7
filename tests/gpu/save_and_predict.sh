#!/usr/bin/env bash
# A model trained on a GPU, saved, loaded and run: scripts/gpu_check.sh's save_load phase.
#   tests/gpu/save_and_predict.sh DIR DEVICES PYTHON LOCKSTEP [ENV...]
# Trains the flagship for 200 steps on DEVICES (e.g. gpu:0), saves it as DIR/m.keras and as a
# lockstep folder, then `lockstep predict`s the first 100 MNIST test images with each (PYTHON,
# with numpy, writes them as .npy from $LOCKSTEP_DATA_DIR/mnist). Passes when both give the same
# classes, most of them right, and the probabilities sum to 1.
set -euo pipefail
dir="$1" devices="$2" py="$3"; shift 3
rm -rf "$dir" && mkdir -p "$dir"
"$py" - "$LOCKSTEP_DATA_DIR/mnist" "$dir" <<'PY'
import gzip, sys
import numpy as np
src, out = sys.argv[1], sys.argv[2]
with gzip.open(f"{src}/t10k-images-idx3-ubyte.gz") as f:
    f.read(16)
    np.save(f"{out}/images.npy", np.frombuffer(f.read(100 * 784), dtype=np.uint8).reshape(100, 28, 28))
with gzip.open(f"{src}/t10k-labels-idx1-ubyte.gz") as f:
    f.read(8)
    np.save(f"{out}/labels.npy", np.frombuffer(f.read(100), dtype=np.uint8))
PY
"$@" train --devices "$devices" --epochs 1 --steps-per-epoch 200 --no-tensorboard --verbose 0 --logdir "$dir/run" \
  --save-model "$dir/m.keras"
"$@" train --devices "$devices" --epochs 1 --steps-per-epoch 200 --no-tensorboard --verbose 0 --logdir "$dir/run2" \
  --save-model "$dir/folder"
"$@" predict --model "$dir/m.keras" --input "$dir/images.npy" --output "$dir/p.npy"
"$@" predict --model "$dir/folder" --input "$dir/images.npy" > "$dir/classes.txt"
"$py" - "$dir" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
p, labels = np.load(f"{d}/p.npy"), np.load(f"{d}/labels.npy")
classes = np.array([int(line) for line in open(f"{d}/classes.txt") if line.strip()])
assert p.shape == (100, 10), p.shape
assert np.allclose(p.sum(1), 1, atol=1e-5), p.sum(1)[:5]
assert (classes == p.argmax(1)).all(), "the .keras file and the folder predict different classes"
right = int((classes == labels).sum())
assert right >= 80, f"only {right} of 100 right"
print(f"ok: saved from the device, loaded and run: {right} of 100 test images right, the same classes both ways")
PY
