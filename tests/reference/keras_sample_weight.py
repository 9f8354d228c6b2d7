#!/usr/bin/env python3
"""Keras' sample_weight and class_weight against real Keras 3 (TF backend, .venv-ref).

usage: keras_sample_weight.py DIR KERAS_FILES_DRIVER

Keras builds a Dense(8, relu) -> Dense(3, softmax) MLP (Adam, sparse categorical cross-entropy)
and saves it untrained. From that file, lockstep (keras_files_driver weighted) and Keras each
(a) evaluate it with sample weights (some 0, one negative; batch 8): the same loss (relative 1e-5),
    Keras 3's sum(w * loss) / N, which differs from the unweighted loss and from sum(w * loss) / sum(w);
(b) train it an epoch (batch 8, in order) with those sample weights, and
(c) with class_weight {0: 0.5, 2: 3.0} (class 1 absent: weight 1):
    the same epoch loss (1e-5) and weights (relative 1e-4).
The model is compiled with metrics=["accuracy"] and weighted_metrics=["accuracy",
SparseTopKCategoricalAccuracy(k=2, name="top2")], which lockstep reads from the file: (a) and (b)
log the same names (Keras' weighted_accuracy for the second "accuracy") and metric values (1e-6).

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, np, keras  # noqa: E402

CLASS_WEIGHT = {0: 0.5, 2: 3.0}


def number(path):
    with open(path) as f:
        return float(f.read())


def main():
    d, driver = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(6)
    x = rng.normal(size=(44, 4)).astype(np.float32)  # batches of 8 and a last one of 4
    y = rng.integers(0, 3, size=44).astype(np.int64)
    w = rng.uniform(0.0, 2.0, size=44).astype(np.float32)
    w[[2, 9]] = 0.0
    w[5] = -0.5  # Keras lets a weight be negative
    for name, a in (("x", x), ("y", y), ("w", w)):
        np.save(os.path.join(d, name + ".npy"), a)
    keras.utils.set_random_seed(5)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(3, activation="softmax")])
    m.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              weighted_metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")])
    base = os.path.join(d, "base.keras")
    m.save(base)

    r = subprocess.run([driver, "weighted", base] + [os.path.join(d, n + ".npy") for n in ("x", "y", "w")]
                       + [",".join(f"{c}:{v}" for c, v in CLASS_WEIGHT.items()), d], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: keras_files_driver weighted: {r.stderr}")
        return 1

    # (a) evaluate.
    keras_logs = keras.saving.load_model(base).evaluate(x, y, sample_weight=w, batch_size=8, verbose=0,
                                                        return_dict=True)
    keras_loss = keras_logs["loss"]
    with open(os.path.join(d, "evaluate_logs.json")) as f:
        lockstep_logs = json.load(f)
    check(set(lockstep_logs) == set(keras_logs) == {"loss", "accuracy", "weighted_accuracy", "top2"},
          f"(a) evaluate's logs: lockstep {sorted(lockstep_logs)}, Keras {sorted(keras_logs)}")
    for name in set(lockstep_logs) & set(keras_logs) - {"loss"}:
        check(abs(lockstep_logs[name] - keras_logs[name]) < 1e-6,
              f"(a) evaluate's {name}: lockstep {lockstep_logs[name]:.7g}, Keras {keras_logs[name]:.7g}")
    check(abs(keras_logs["weighted_accuracy"] - keras_logs["accuracy"]) > 1e-3,
          "(a) the weights change the weighted accuracy")
    lockstep_loss = number(os.path.join(d, "evaluate_loss.txt"))
    check(rel(lockstep_loss, keras_loss) < 1e-5,
          f"(a) evaluate's weighted loss: lockstep {lockstep_loss:.7g}, Keras {keras_loss:.7g}")
    plain = keras.saving.load_model(base).evaluate(x, y, batch_size=8, verbose=0, return_dict=True)["loss"]
    p = keras.saving.load_model(base).predict(x, verbose=0)
    each = -np.log(p[np.arange(len(y)), y].astype(np.float64))
    check(abs(keras_loss - plain) > 1e-3 and abs(keras_loss - np.sum(w * each) / np.sum(w)) > 1e-3
          and abs(keras_loss - np.sum(w * each) / len(y)) < 1e-5 * abs(keras_loss),
          f"(a) Keras' loss is sum(w * loss) / N ({np.sum(w * each) / len(y):.7g}), not the plain mean "
          f"({plain:.7g}) nor / sum(w) ({np.sum(w * each) / np.sum(w):.7g})")

    # (b), (c) an epoch of training.
    for name, kwargs in (("sample_weight", {"sample_weight": w}), ("class_weight", {"class_weight": CLASS_WEIGHT})):
        km = keras.saving.load_model(base)
        h = km.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, **kwargs)
        lm = keras.saving.load_model(os.path.join(d, name + ".keras"))
        lockstep_fit_loss = number(os.path.join(d, name + "_loss.txt"))
        check(rel(lockstep_fit_loss, h.history["loss"][-1]) < 1e-5,
              f"{name}: the epoch's loss, lockstep {lockstep_fit_loss:.7g}, Keras {h.history['loss'][-1]:.7g}")
        worst = max(rel(a, b) for a, b in zip(lm.get_weights(), km.get_weights()))
        check(worst < 1e-4, f"{name}: the weights after an epoch agree (relative {worst:.2g})")
        if name == "sample_weight":
            with open(os.path.join(d, "sample_weight_history.json")) as f:
                history = json.load(f)
            for metric in ("accuracy", "weighted_accuracy", "top2"):
                got, want = history.get(metric, [float("nan")])[-1], h.history[metric][-1]
                check(abs(got - want) < 1e-6, f"(b) fit's {metric}: lockstep {got:.7g}, Keras {want:.7g}")
    print("FAILED: " + "; ".join(kf.failures) if kf.failures else "all agree")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
