#!/usr/bin/env python3
"""A call's training= in .keras files, against real Keras 3 (TF backend, .venv-ref).

usage: keras_training_arg.py DIR KERAS_FILES_DRIVER

Keras 3.15 passes fit's (and evaluate's, predict's) mode over a call's own training=, where Keras'
documentation and its transfer-learning guide say the call's own wins; lockstep does as documented.
So the arithmetic is compared with a Keras custom loop that runs the model as the call asks:

(a) Keras builds Dense -> BatchNormalization()(x, training=False) -> Dense (the statistics set away
    from 0 and 1) and saves it (Keras writes "kwargs": {"training": false} on that call); lockstep
    loads it and fits 6 steps (batch 8, in order); Keras runs 6 steps of model(x, training=False)
    under a GradientTape with the same Adam: the weights agree (relative 1e-4), the moving
    statistics keep their bits, and lockstep's file still says training=false on the call.
(b) lockstep's re-save of that file loads in Keras (the call keeps training=false) and Keras
    predicts with it what it predicts with its own model (relative 1e-5).

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, np, keras  # noqa: E402
import tensorflow as tf  # noqa: E402


def keras_model():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(8, activation="relu")(inputs)
    h = keras.layers.BatchNormalization(name="bn")(h, training=False)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(h), name="inference_bn")
    bn = model.get_layer("bn")
    rng = np.random.default_rng(2)
    bn.moving_mean.assign(rng.uniform(0.1, 0.5, 8).astype(np.float32))
    bn.moving_variance.assign(rng.uniform(0.5, 2.0, 8).astype(np.float32))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    return model


def six_inference_steps(model, x, y):
    """What lockstep's fit does with the call fixed to inference: a custom loop of model(x, training=False)."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    for i in range(0, 48, 8):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i:i + 8], model(x[i:i + 8], training=False))
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))


def bn_kwargs(path):
    with zipfile.ZipFile(path) as z:
        config = json.loads(z.read("config.json"))
    layer = next(lay for lay in config["config"]["layers"] if lay["config"]["name"] == "bn")
    return layer["inbound_nodes"][0].get("kwargs", {})


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    d, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(48, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=48).astype(np.int64)
    xs, ys = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
    np.save(xs, x)
    np.save(ys, y)

    model = keras_model()
    path, out, resaved = (os.path.join(d, n) for n in ("keras.keras", "continued.keras", "resaved.keras"))
    model.save(path)
    check(bn_kwargs(path).get("training") is False, f"Keras writes the call's training=False: {bn_kwargs(path)}")
    r = run(driver, "optimizer-continue", path, xs, ys, out)
    check(r.returncode == 0, f"(a) lockstep loads Keras' file and fits 6 steps {r.stderr.strip()}")
    if r.returncode != 0:
        return 1
    moving = [model.get_layer("bn").moving_mean.numpy(), model.get_layer("bn").moving_variance.numpy()]
    six_inference_steps(model, x, y)
    continued = keras.saving.load_model(out)
    got, want = continued.get_weights(), model.get_weights()
    worst = max(rel(g, w) for g, w in zip(got, want))
    check(len(got) == len(want) and worst <= 1e-4,
          f"(a) lockstep's fit vs Keras' inference-mode steps: weights agree (worst relative {worst:.2e} <= 1e-4)")
    bn = continued.get_layer("bn")
    check(np.array_equal(bn.moving_mean.numpy(), moving[0]) and np.array_equal(bn.moving_variance.numpy(), moving[1]),
          "(a) lockstep's fit leaves the moving statistics of the training=False call alone")
    check(bn_kwargs(out).get("training") is False, f"(a) lockstep's file keeps training=false: {bn_kwargs(out)}")

    r = run(driver, "resave", path, resaved)
    check(r.returncode == 0, f"(b) lockstep re-saves Keras' file {r.stderr.strip()}")
    if r.returncode == 0:
        again = keras.saving.load_model(resaved)
        fresh = keras_model()
        err = rel(again.predict(x, verbose=0), fresh.predict(x, verbose=0))
        check(err <= 1e-5 and bn_kwargs(resaved).get("training") is False,
              f"(b) Keras loads lockstep's re-save (training=false kept) and predicts the same (relative {err:.2e})")
    print(f"{len(kf.failures)} failed" if kf.failures else "all agree")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
