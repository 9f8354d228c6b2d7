#!/usr/bin/env python3
"""Nested models in .keras files (a model used as a layer), against real Keras 3 (TF backend).

usage: keras_nested.py DIR LOCKSTEP_CLI KERAS_FILES_DRIVER

Keras writes a model called in another (keras.io's transfer-learning guide:
x = base_model(inputs, training=False)) as one layer entry of class Sequential or Functional with
its own config, its weights under its own group (layers/sequential/layers/dense/vars). lockstep
loads it with the inner layers flattened into the outer graph.

(a) Transfer learning: a frozen Sequential base (Dense, BatchNormalization with moved statistics)
    called with training=False, a Dense head, fitted a step by Keras with Adam and saved. lockstep
    predicts Keras' predictions (relative 1e-5), fits 6 steps (batch 8, in order) to the weights
    Keras' fit reaches on its own model (relative 1e-4; the base frozen: its BatchNormalization is
    in inference mode in both, so Keras 3's fit overriding the call's training= changes nothing),
    the optimizer's state carried over; Keras loads lockstep's (flattened) file and predicts the same.
(b) Two levels and a shared call, all trainable: a Functional 'mid' holding a Functional 'deep',
    called twice in the outer model, fitted a step: lockstep predicts Keras' predictions and its
    6 further steps reach Keras' weights (the Adam slots map to the file's order), and Keras loads
    lockstep's re-save and predicts the same.
(c) A Functional inside a Sequential: lockstep predicts Keras' predictions; Keras loads the re-save.
(d) An inner model of two outputs (keras_history [inner, 0, 1] names its second): the same.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, np, keras, lockstep_predict, resave_and_load  # noqa: E402


def transfer_model():
    keras.utils.set_random_seed(7)
    base = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="relu"),
                             keras.layers.BatchNormalization()], name="base")
    rng = np.random.default_rng(3)
    bn = base.layers[-1]
    bn.moving_mean.assign(rng.uniform(0.1, 0.5, 6).astype(np.float32))
    bn.moving_variance.assign(rng.uniform(0.5, 2.0, 6).astype(np.float32))
    base.trainable = False
    inputs = keras.Input((4,))
    x = base(inputs, training=False)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x), name="transfer")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    return model


def two_level_model():
    keras.utils.set_random_seed(8)
    i0 = keras.Input((4,))
    deep = keras.Model(i0, keras.layers.Dense(4, activation="tanh")(i0), name="deep")
    i1 = keras.Input((4,))
    mid = keras.Model(i1, keras.layers.Concatenate()([keras.layers.Dense(5)(i1), deep(i1)]), name="mid")
    inputs = keras.Input((4,))
    a = mid(keras.layers.Dense(4)(inputs))
    b = mid(inputs)
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.Add()([a, b]))
    model = keras.Model(inputs, out, name="two_level")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    return model


def fit_step(model, x, y):
    model.fit(x[:8], y[:8], batch_size=8, epochs=1, shuffle=False, verbose=0)


def continue_both(d, driver, model, path, x, y, xs, ys, what):
    """lockstep loads `path`, fits 6 steps and saves; Keras fits its own the same: weights agree."""
    out = os.path.join(d, what + "_continued.keras")
    r = run(driver, "optimizer-continue", path, xs, ys, out)
    check(r.returncode == 0, f"{what}: lockstep loads Keras' nested file and fits 6 steps {r.stderr.strip()}")
    if r.returncode != 0:
        return
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    continued = keras.saving.load_model(out)
    got, want = continued.get_weights(), model.get_weights()
    worst = max(rel(g, w) for g, w in zip(got, want)) if len(got) == len(want) else float("inf")
    check(len(got) == len(want) and worst <= 1e-4,
          f"{what}: lockstep's 6 steps vs Keras' fit: {len(got)} weights agree (worst relative {worst:.2e} <= 1e-4)")
    err = rel(continued.predict(x, verbose=0), model.predict(x, verbose=0))
    check(err <= 1e-4, f"{what}: Keras loads lockstep's flattened file and predicts as its fitted model ({err:.2e})")


def predict_both(d, cli, driver, model, path, x, what):
    """lockstep predicts Keras' predictions from the nested file; Keras loads lockstep's re-save."""
    want = model.predict(x, verbose=0)
    got = lockstep_predict(cli, path, x, d, what)
    if got is not None:
        err = rel(got, want)
        check(err <= 1e-5, f"{what}: lockstep predicts from Keras' nested file as Keras (relative {err:.2e})")
    again = resave_and_load(driver, path, os.path.join(d, what + "_resaved.keras"), what)
    if again is not None:
        err = rel(again.predict(x, verbose=0), want)
        check(err <= 1e-5, f"{what}: Keras loads lockstep's re-save and predicts the same (relative {err:.2e})")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    d, cli, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(48, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=48).astype(np.int64)
    xs, ys = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
    np.save(xs, x)
    np.save(ys, y)

    # (a)
    model = transfer_model()
    fit_step(model, x, y)
    path = os.path.join(d, "transfer.keras")
    model.save(path)
    predict_both(d, cli, driver, model, path, x, "(a) transfer")
    moving = [v.numpy() for v in model.get_layer("base").layers[-1].non_trainable_weights]
    continue_both(d, driver, model, path, x, y, xs, ys, "(a) transfer")
    after = [v.numpy() for v in model.get_layer("base").layers[-1].non_trainable_weights]
    check(all(np.array_equal(a, b) for a, b in zip(moving, after)),
          "(a) the frozen base's moving statistics stay (Keras' fit too)")

    # (b)
    model = two_level_model()
    fit_step(model, x, y)
    path = os.path.join(d, "two_level.keras")
    model.save(path)
    predict_both(d, cli, driver, model, path, x, "(b) two levels, shared")
    continue_both(d, driver, model, path, x, y, xs, ys, "(b) two levels, shared")

    # (c)
    keras.utils.set_random_seed(9)
    i0 = keras.Input((4,))
    inner = keras.Model(i0, keras.layers.Dense(5, activation="relu")(i0), name="inner")
    model = keras.Sequential([keras.Input((4,)), inner, keras.layers.Dense(3)], name="seq_outer")
    path = os.path.join(d, "in_sequential.keras")
    model.save(path)
    predict_both(d, cli, driver, model, path, x, "(c) Functional in Sequential")

    # (d)
    keras.utils.set_random_seed(10)
    i0 = keras.Input((4,))
    two = keras.Model(i0, [keras.layers.Dense(3)(i0), keras.layers.Dense(3, activation="relu")(i0)], name="two")
    inputs = keras.Input((4,))
    first, second = two(inputs)
    model = keras.Model(inputs, keras.layers.Subtract()([second, first]), name="two_outputs")
    path = os.path.join(d, "two_outputs.keras")
    model.save(path)
    predict_both(d, cli, driver, model, path, x, "(d) an inner model of two outputs")

    print(f"{len(kf.failures)} failed" if kf.failures else "all agree")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
