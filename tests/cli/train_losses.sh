#!/usr/bin/env bash
# train_losses.sh LOCKSTEP CASE : `lockstep train --loss` on data that is not integer class labels
# (issue 42, item 6); each CASE is one ctest entry (cli.train_losses.CASE). The .npz files are
# written without numpy (the .npy headers by hand), so the test needs only python3.
set -uo pipefail
cli="$1"; case="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
expect() { timeout 300 "$here/expect.sh" "$@" || exit 1; }
base=(train --devices cpu:1 --verbose 0 --no-tensorboard --dropout 0 --seed 7)
# data KIND PATH : 512 training and 128 test examples of 4 float32 features in [-1, 1].
#   linear : y = 2 x0 - x1 + 0.5 x2 + 0.1, float32 (N,)      rows : that and x3 - x0, float32 (N, 2)
#   labels : the argmax of (x0 + x1, x2 - x0, x3), int64 (N,)  onehot : the same as float32 rows (N, 3)
#   binary : x0 + x1 > 0, int64 (N,)
data() {
  python3 - "$@" <<'PY' || { echo "FAIL: could not write $2"; exit 1; }
import random, struct, sys, zipfile
kind, path = sys.argv[1], sys.argv[2]
rng = random.Random(42)
def npy(descr, shape, fmt, values):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join("%d," % d for d in shape))
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + struct.pack("<%d%s" % (len(values), fmt), *values)
def split(n):
    x = [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(n)]
    scores = [[r[0] + r[1], r[2] - r[0], r[3]] for r in x]
    label = [max(range(3), key=s.__getitem__) for s in scores]
    lin = [2 * r[0] - r[1] + 0.5 * r[2] + 0.1 for r in x]
    y = {"linear": ("<f4", (n,), "f", lin),
         "rows": ("<f4", (n, 2), "f", [v for r, l in zip(x, lin) for v in (l, r[3] - r[0])]),
         "labels": ("<i8", (n,), "q", label),
         "onehot": ("<f4", (n, 3), "f", [float(c == l) for l in label for c in range(3)]),
         "binary": ("<i8", (n,), "q", [int(r[0] + r[1] > 0) for r in x])}[kind]
    return npy("<f4", (n, 4), "f", [v for r in x for v in r]), npy(*y)
with zipfile.ZipFile(path, "w") as z:
    for name, n in (("train", 512), ("test", 128)):
        x, y = split(n)
        z.writestr("x_%s.npy" % name, x)
        z.writestr("y_%s.npy" % name, y)
PY
}
# json FILE KEY : one number of a --metrics-out file.
json() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# keras_lr IN OUT SCHEDULE_JSON : a copy of the .keras archive IN whose optimizer's learning_rate is SCHEDULE_JSON.
keras_lr() {
  python3 - "$@" <<'PY' || { echo "FAIL: could not rewrite $1"; exit 1; }
import json, sys, zipfile
src, dst, lr = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
    for item in zin.infolist():
        data = zin.read(item.filename)
        if item.filename == "config.json":
            config = json.loads(data)
            config["compile_config"]["optimizer"]["config"]["learning_rate"] = lr
            data = json.dumps(config).encode()
        zout.writestr(item, data)
PY
}

case "$case" in
regression)  # mse on a learnable linear target: the test mse ends below a tenth of y's variance
  data linear "$work/reg.npz"
  data rows "$work/rows.npz"
  var=$(python3 -c 'print((4 + 1 + 0.25) / 3)')  # 2 x0 - x1 + 0.5 x2 with x uniform in [-1, 1]
  expect 0 "test_loss: [0-9.]+ - test_mae: [0-9.]+ - train_steps" "$cli" "${base[@]}" --data "$work/reg.npz" \
    --loss mse --epochs 10 --learning-rate 0.01 --logdir "$work/run" --metrics-out "$work/m.json" --save-model "$work/reg.keras"
  echo "test mse $(json "$work/m.json" test_loss), variance of y $var"
  python3 -c 'import sys; mse, var = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if mse < 0.1 * var else 1)' \
    "$(json "$work/m.json" test_loss)" "$var" || { echo "FAIL: test mse $(json "$work/m.json" test_loss) >= 0.1 x $var"; exit 1; }
  # The saved model is a regression model: evaluate reads float targets for it.
  expect 0 "test_loss: [0-9.]+ - test_mae: [0-9.]+" "$cli" evaluate --model "$work/reg.keras" --data "$work/reg.npz"
  # Two target values per example: Dense(2), mae.
  expect 0 "test_loss: [0-9.]+ - test_mae" "$cli" "${base[@]}" --data "$work/rows.npz" --loss mae --epochs 10 \
    --learning-rate 0.01 --logdir "$work/run_rows" --metrics-out "$work/r.json"
  echo "two outputs: test mae $(json "$work/r.json" test_mae)"
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 0.2 else 1)' "$(json "$work/r.json" test_mae)" ||
    { echo "FAIL: test mae $(json "$work/r.json" test_mae) >= 0.2"; exit 1; }
  ;;
one_hot)  # categorical_crossentropy on one-hot rows trains as the integer labels do
  data labels "$work/labels.npz"
  data onehot "$work/onehot.npz"
  flags=(--epochs 10 --learning-rate 0.01)
  expect 0 "test_accuracy" "$cli" "${base[@]}" "${flags[@]}" --data "$work/labels.npz" --logdir "$work/a" --metrics-out "$work/a.json"
  expect 0 "test_accuracy" "$cli" "${base[@]}" "${flags[@]}" --data "$work/onehot.npz" --loss categorical_crossentropy \
    --logdir "$work/b" --metrics-out "$work/b.json"
  python3 -c '
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print("integer labels %.4f, one-hot %.4f" % (a, b))
sys.exit(0 if a >= 0.9 and b >= 0.9 and abs(a - b) <= 0.02 else 1)' "$(json "$work/a.json" test_accuracy)" "$(json "$work/b.json" test_accuracy)" ||
    { echo "FAIL: the accuracies differ or are low"; exit 1; }
  ;;
binary)  # binary_crossentropy on 0/1 labels: one sigmoid output, accuracy at a 0.5 threshold
  data binary "$work/binary.npz"
  expect 0 "test_loss: [0-9.]+ - test_accuracy: 0\.9[0-9]+" "$cli" "${base[@]}" --epochs 10 --learning-rate 0.01 \
    --data "$work/binary.npz" --loss binary_crossentropy --logdir "$work/run" --save-model "$work/b.keras"
  expect 0 "test_accuracy: 0\.9[0-9]+" "$cli" evaluate --model "$work/b.keras" --data "$work/binary.npz"
  ;;
bad_combinations)  # targets a loss cannot take: status 2, the flag and the shape named, in seconds
  data labels "$work/labels.npz"
  data onehot "$work/onehot.npz"
  data linear "$work/reg.npz"
  short=("${base[@]}" --epochs 1 --steps-per-epoch 1)
  expect 2 "labels.npz': y_train holds int64 of shape \(512,\), but --loss categorical_crossentropy needs one-hot rows \(N, classes\).*sparse_categorical_crossentropy \(the default\)" \
    "$cli" "${short[@]}" --data "$work/labels.npz" --loss categorical_crossentropy --logdir "$work/r1"
  expect 2 "reg.npz': y_train holds float32 of shape \(512,\), but --loss sparse_categorical_crossentropy \(the default\) needs integer class labels.*--loss mse" \
    "$cli" "${short[@]}" --data "$work/reg.npz" --logdir "$work/r2"
  expect 2 "onehot.npz': y_train holds float32 of shape \(512, 3\), but --loss sparse_categorical_crossentropy needs integer class labels.*categorical_crossentropy" \
    "$cli" "${short[@]}" --data "$work/onehot.npz" --loss sparse_categorical_crossentropy --logdir "$work/r3"
  expect 2 "--num-classes applies to integer class labels.*--loss mse takes its outputs from y_train's shape \(512,\)" \
    "$cli" "${short[@]}" --data "$work/reg.npz" --loss mse --num-classes 3 --logdir "$work/r4"
  expect 2 "--loss: hinge not in \\{sparse_categorical_crossentropy,categorical_crossentropy" "$cli" "${short[@]}" --data "$work/reg.npz" --loss hinge
  expect 2 "labels.npz': y_train holds values from 0 to 2, but --loss binary_crossentropy needs targets in \\[0, 1\\]" \
    "$cli" "${short[@]}" --data "$work/labels.npz" --loss binary_crossentropy --logdir "$work/r6"
  # mse on integer class labels is allowed, as in Keras: one linear output.
  expect 0 "test_mae" "$cli" "${short[@]}" --data "$work/labels.npz" --loss mse --logdir "$work/r5"
  for r in r1 r2 r3 r4 r6; do [[ ! -e "$work/$r" ]] || { echo "FAIL: $r was made before the targets were checked"; exit 1; }; done
  ;;
keras_schedule)  # a .keras file's schedule: kept by evaluate; a schedule lockstep lacks warns at most once
  data labels "$work/labels.npz"
  expect 0 "test_accuracy" "$cli" "${base[@]}" --epochs 1 --data "$work/labels.npz" --logdir "$work/run" --save-model "$work/m.keras"
  keras_lr "$work/m.keras" "$work/exp.keras" '{"module": "keras.optimizers.schedules", "class_name": "ExponentialDecay",
    "config": {"initial_learning_rate": 0.01, "decay_steps": 10, "decay_rate": 0.5, "staircase": false,
    "name": "ExponentialDecay"}, "registered_name": null}'
  keras_lr "$work/m.keras" "$work/inv.keras" '{"module": "keras.optimizers.schedules", "class_name": "InverseTimeDecay",
    "config": {"initial_learning_rate": 0.01, "decay_steps": 10, "decay_rate": 0.5}, "registered_name": null}'
  out="$("$cli" evaluate --model "$work/exp.keras" --data "$work/labels.npz" 2>&1)" || { echo "FAIL: evaluate: $out"; exit 1; }
  ! grep -q WARNING <<<"$out" || { echo "FAIL: a supported schedule warned: $out"; exit 1; }
  # train compiles the file's model with its own flags: the file's compile config is not read.
  # (--dropout is the built-in models': a model file given with it is refused, so it is left out.)
  out="$("$cli" "${base[@]:0:6}" --seed 7 --epochs 1 --steps-per-epoch 2 --model "$work/inv.keras" --data "$work/labels.npz" --logdir "$work/run2" 2>&1)" ||
    { echo "FAIL: train --model inv.keras: $out"; exit 1; }
  ! grep -q WARNING <<<"$out" || { echo "FAIL: train warned about a compile config it does not use: $out"; exit 1; }
  out="$("$cli" evaluate --model "$work/inv.keras" --data "$work/labels.npz" 2>&1)"
  [[ "$(grep -c "WARNING: Keras file .*loaded uncompiled: learning-rate schedule InverseTimeDecay is not supported" <<<"$out")" == 1 ]] ||
    { echo "FAIL: expected one WARNING naming InverseTimeDecay: $out"; exit 1; }
  ;;
*) echo "unknown case $case"; exit 2 ;;
esac
