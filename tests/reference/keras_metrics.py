#!/usr/bin/env python3
"""Keras 3's accuracy metrics in .keras files, both ways against real Keras (TF backend, .venv-ref).

usage: keras_metrics.py DIR KERAS_FILES_DRIVER

For a classifier on one-hot targets (categorical_crossentropy), one on integer labels (sparse) and
a sigmoid one (binary_crossentropy), compiled with metric names ("accuracy",
"top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "binary_accuracy") and objects
(TopKCategoricalAccuracy(k=1, 2), SparseTopKCategoricalAccuracy(k=1, 2), BinaryAccuracy(threshold)):
Keras evaluates and saves; lockstep loads the file, compiled from its compile_config, and evaluates
every metric to Keras' value (the classifiers' first two classes have equal weights, so every row's
scores tie there: Keras' in_top_k rule on ties runs end to end); lockstep's re-save lists the
metrics exactly as Keras' file does (names as names, objects with their k and threshold), and Keras
loads it and evaluates the same again. And keras.metrics.Accuracy (exact equality) beside
"accuracy" on a loss that does not say which accuracy ("exact": mean_squared_error on a ReLU output,
whose zeros equal the 0 targets exactly): Keras' Accuracy is lockstep's, both ways, and "accuracy"
is Keras' pick by shapes (binary_accuracy for one output).

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, run, np, keras  # noqa: E402

N, FEATURES, CLASSES = 64, 6, 4


def compile_config(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("config.json"))["compile_config"]


def model_of(kind):
    keras.utils.set_random_seed(5)
    units = 1 if kind in ("binary", "exact") else CLASSES
    activation = {"binary": "sigmoid", "exact": "relu"}.get(kind, "softmax")
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(units, activation=activation)],
                             name=f"metrics_{kind}")
    if units > 1:  # class 1's weights are class 0's: the two tie in every row
        kernel, bias = model.layers[0].get_weights()
        kernel[:, 1] = kernel[:, 0]
        bias[:] = np.arange(units) * 0.1
        bias[1] = bias[0]
        model.layers[0].set_weights([kernel, bias])
    metrics = {
        "categorical": ["accuracy", "top_k_categorical_accuracy", keras.metrics.TopKCategoricalAccuracy(k=1, name="top1"),
                        keras.metrics.TopKCategoricalAccuracy(k=2, name="top2"),
                        keras.metrics.BinaryAccuracy(threshold=0.3, name="bin")],
        "sparse": ["accuracy", "sparse_top_k_categorical_accuracy",
                   keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="stop1"),
                   keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="stop2")],
        "binary": ["accuracy", "binary_accuracy", keras.metrics.BinaryAccuracy(threshold=0.7, name="high")],
        "exact": ["accuracy", keras.metrics.Accuracy(name="exact")],
    }[kind]
    loss = {"categorical": "categorical_crossentropy", "sparse": "sparse_categorical_crossentropy",
            "binary": "binary_crossentropy", "exact": "mean_squared_error"}[kind]
    model.compile(optimizer="sgd", loss=loss, metrics=metrics)
    return model


def data(kind):
    rng = np.random.RandomState(3)
    x = rng.normal(size=(N, FEATURES)).astype(np.float32)
    labels = rng.randint(0, CLASSES, size=N).astype(np.int64)
    if kind == "categorical":
        return x, np.eye(CLASSES, dtype=np.float32)[labels]
    if kind == "sparse":
        return x, labels
    return x, (labels >= 2).astype(np.float32)[:, None]


def agree(got, want, what):
    names = sorted(want)
    check(sorted(got) == names, f"{what}: the logs are {sorted(got)}, Keras' {names}")
    for name in names:
        if name in got:
            ok = abs(got[name] - want[name]) <= 1e-5 * max(1.0, abs(want[name]))
            check(ok, f"{what}: {name} {got[name]:.7f}, Keras {want[name]:.7f}")


def part(d, driver, kind):
    model = model_of(kind)
    x, y = data(kind)
    want = {k: float(v) for k, v in model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True).items()}
    path, xs, ys = (os.path.join(d, f"{kind}{s}") for s in (".keras", "_x.npy", "_y.npy"))
    model.save(path)
    np.save(xs, x)
    np.save(ys, y)
    out = os.path.join(d, f"{kind}_logs.json")
    r = run(driver, "evaluate", path, xs, ys, out)
    if r.returncode != 0:
        check(False, f"{kind}: lockstep evaluate: {r.stderr.strip()}")
        return
    with open(out) as f:
        agree(json.load(f), want, f"{kind}: lockstep on Keras' file")
    again = os.path.join(d, f"{kind}_again.keras")
    r = run(driver, "resave", path, again)
    if r.returncode != 0:
        check(False, f"{kind}: resave: {r.stderr.strip()}")
        return
    listed, keras_listed = compile_config(again)["metrics"], compile_config(path)["metrics"]
    check(listed == keras_listed, f"{kind}: lockstep's re-save lists the metrics as Keras did: {listed}")
    loaded = keras.saving.load_model(again)
    back = {k: float(v) for k, v in loaded.evaluate(x, y, batch_size=8, verbose=0, return_dict=True).items()}
    agree(back, want, f"{kind}: Keras on lockstep's re-save")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    d, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    for kind in ("categorical", "sparse", "binary", "exact"):
        part(d, driver, kind)
    print(f"{len(kf.failures)} failure(s)")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
