#!/usr/bin/env python3
"""A sequence model's masked loss and per-step sample weights against real Keras 3 (TF backend).

usage: keras_sequence_masks.py DIR KERAS_FILES_DRIVER

Keras builds a tagger, Input((T,)) -> Embedding(V, 8, mask_zero=True, frozen) -> Dense(8, relu) ->
Dense(V, softmax) (a label per step, padded steps 0), compiled with Adam, sparse categorical
cross-entropy, metrics=["accuracy"] and weighted_metrics=["accuracy"], and saves it untrained.
From that file lockstep (keras_files_driver sequence) and Keras each
(a) evaluate it (batch 8): Keras' loss is the mean over the kept steps only (checked on Keras' own
    predictions), and lockstep's loss (relative 1e-5) and accuracy (1e-6) are Keras';
(b) evaluate it with sample weights of shape (N, T), one per step: the same loss, accuracy and
    weighted_accuracy;
(c) train it an epoch with those weights (batch 8, in order): the same logs and weights
    (relative 1e-4).
The same for the tagger on float features, Input((T, 3)) -> Masking(mask_value=0.5) -> Dense(8,
relu) -> Dense(V, softmax), whose padded steps are all 0.5: Masking's mask in place of the
Embedding's; and for a tagger of 2T steps, the Embedding's steps concatenated (axis 1) with a
Masking's of a second table (token 5 masked): Concatenate's mask.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, np, keras  # noqa: E402

N, T, V = 44, 7, 9


def logs(path):
    with open(path) as f:
        return json.load(f)


def agree(what, mine, keras_logs):
    # (fit's history holds lockstep's own measurements beside Keras' logs)
    check(set(keras_logs) <= set(mine), f"{what}: logs lockstep {sorted(mine)}, Keras {sorted(keras_logs)}")
    for name in set(mine) & set(keras_logs):
        got, want = mine[name], keras_logs[name]
        got, want = (got[-1], want[-1]) if isinstance(want, list) else (got, want)
        ok = rel(got, want) < 1e-5 if name == "loss" else abs(got - want) < 1e-6
        check(ok, f"{what}: {name}, lockstep {got:.7g}, Keras {want:.7g}")


def compare(d, driver, label, m, x, y, w, mask):
    """(a), (b) and (c) for the compiled model m, untrained, on x (kept steps: mask), y and w."""
    os.makedirs(d, exist_ok=True)
    for name, a in (("x", x), ("y", y), ("w", w)):
        np.save(os.path.join(d, name + ".npy"), a)
    base = os.path.join(d, "base.keras")
    m.save(base)
    r = subprocess.run([driver, "sequence", base] + [os.path.join(d, n + ".npy") for n in ("x", "y", "w")] + [d],
                       capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"{label}: keras_files_driver sequence: {r.stderr.strip()}")
        return

    # (a) Keras leaves the padded steps out of its loss: the mean of the kept steps' losses.
    km = keras.saving.load_model(base)
    plain = km.evaluate(x, y, batch_size=N, verbose=0, return_dict=True)
    p = km.predict(x, verbose=0).astype(np.float64)
    each = -np.log(np.take_along_axis(p, y[..., None], axis=-1)[..., 0])
    check(rel(plain["loss"], each[mask].mean()) < 1e-5 and rel(plain["loss"], each.mean()) > 1e-4,
          f"{label} (a) Keras' masked loss {plain['loss']:.7g} is the kept steps' mean {each[mask].mean():.7g}, "
          f"not every step's {each.mean():.7g}")
    agree(f"{label} (a) evaluate", logs(os.path.join(d, "evaluate_plain.json")),
          km.evaluate(x, y, batch_size=8, verbose=0, return_dict=True))
    # (b) weights per step.
    weighted = km.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0, return_dict=True)
    check(abs(weighted["weighted_accuracy"] - weighted["accuracy"]) > 1e-3, f"{label} (b) the weights change the accuracy")
    agree(f"{label} (b) evaluate with weights per step", logs(os.path.join(d, "evaluate_weighted.json")), weighted)
    # (c) an epoch of training with them.
    hist = km.fit(x, y, sample_weight=w, batch_size=8, epochs=1, shuffle=False, verbose=0).history
    agree(f"{label} (c) fit", logs(os.path.join(d, "fit_history.json")), hist)
    lm = keras.saving.load_model(os.path.join(d, "trained.keras"))
    worst = max(rel(a, b) for a, b in zip(lm.get_weights(), km.get_weights()))
    check(worst < 1e-4, f"{label} (c) the weights after an epoch agree (relative {worst:.2g})")


def compiled(inputs, h):
    m = keras.Model(inputs, keras.layers.Dense(V, activation="softmax")(h))
    m.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              weighted_metrics=["accuracy"])
    return m


def main():
    d, driver = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(8)
    kept = rng.integers(1, T + 1, size=N)  # steps each row keeps; the rest are padding (0)
    x = np.zeros((N, T), np.float32)
    for i, k in enumerate(kept):
        x[i, :k] = rng.integers(1, V, size=k)
    y = rng.integers(0, V, size=(N, T)).astype(np.int64)
    w = rng.uniform(0.0, 2.0, size=(N, T)).astype(np.float32)
    keras.utils.set_random_seed(5)
    inputs = keras.Input((T,))
    # Frozen: Keras' TF backend updates an Embedding's table from its sparse gradient (IndexedSlices)
    # row by row, a row as often as the batch holds its token, which differs from Adam on the dense
    # gradient; the Dense layers' updates are compared exactly.
    h = keras.layers.Embedding(V, 8, mask_zero=True, trainable=False)(inputs)
    h = keras.layers.Dense(8, activation="relu")(h)
    compare(d, driver, "Embedding(mask_zero)", compiled(inputs, h), x, y, w, x != 0)

    # The same tagger on features (F per step) whose padded steps are all mask_value: Masking's
    # mask instead of the Embedding's. Keras writes it as not_equal and any nodes.
    features = rng.normal(0, 1, size=(N, T, 3)).astype(np.float32)
    features[x == 0] = 0.5
    keras.utils.set_random_seed(6)
    inputs = keras.Input((T, 3))
    h = keras.layers.Masking(mask_value=0.5)(inputs)
    h = keras.layers.Dense(8, activation="relu")(h)
    compare(os.path.join(d, "masking"), driver, "Masking(0.5)", compiled(inputs, h), features, y, w, x != 0)

    # Concatenate along the steps of the Embedding's steps (padding masked) and a Masking's (token 5,
    # whose row of a second, frozen table is zeros, masked): Keras 3's concatenated mask, 2T steps.
    keras.utils.set_random_seed(7)
    inputs = keras.Input((T,))
    e = keras.layers.Embedding(V, 4, mask_zero=True, trainable=False)(inputs)
    table = keras.layers.Embedding(V, 4, trainable=False, name="zero_five")
    h = keras.layers.Concatenate(axis=1)([e, keras.layers.Masking()(table(inputs))])
    m = compiled(inputs, keras.layers.Dense(8, activation="relu")(h))
    table.embeddings.assign(np.where(np.arange(V)[:, None] == 5, 0.0, table.embeddings.numpy()).astype(np.float32))
    y2 = rng.integers(0, V, size=(N, 2 * T)).astype(np.int64)
    w2 = rng.uniform(0.0, 2.0, size=(N, 2 * T)).astype(np.float32)
    compare(os.path.join(d, "concatenate"), driver, "Concatenate(axis=1) of masks", m, x, y2, w2,
            np.concatenate([x != 0, x != 5], axis=1))
    print("FAILED: " + "; ".join(kf.failures) if kf.failures else "all agree")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
