#!/usr/bin/env python3
"""Keras 3 files in both directions, against real Keras (TF backend, .venv-ref).

usage: keras_files.py DIR LOCKSTEP_CLI KERAS_FILES_DRIVER

(a) Keras builds, trains briefly and saves a Sequential convnet, an MLP (both with
    BatchNormalization, so its moving statistics matter) and a Functional residual network (Add); `lockstep predict --model F.keras`
    gives Keras' predictions (relative 1e-5, float32). Keras' save_weights file loads into
    lockstep too (load_weights), and lockstep's re-save of a Keras file loads back in Keras.
(b) lockstep trains an MLP, a convnet and ResNet-20 (a Functional model) and saves .keras files; keras.saving.load_model reads
    them and predicts what `lockstep predict` does (relative 1e-5, or twice the change a one-ulp
    perturbation of the input makes to Keras' own predictions where the trained model is that
    sensitive: float32 cannot agree more closely than that), and compiles them as lockstep did.
(c) Keras models lockstep cannot read (a Conv3D layer): the CLI exits 1 with a message naming the
    file, the layer class and the layer's name (or the problem); a Functional model of two inputs,
    which the library reads (keras_multi_io.py) but the CLI's one tensor of examples cannot feed,
    exits 2 naming its inputs.
(d) Keras' frozen layers (trainable=False: a Dense and a BatchNormalization) load frozen in
    lockstep, and lockstep's re-save loads in Keras with them frozen.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
try:
    import numpy as np
    import keras
except ImportError as e:  # no reference environment: skip, do not fail
    print(f"SKIP: {e}")
    sys.exit(77)

RTOL = 1e-5
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30)) if b.size else 0.0


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def resave_and_load(driver, path, again, what):
    """lockstep's re-save of the .keras file `path` as `again`, loaded in Keras; None (a failure) if it fails."""
    r = run(driver, "resave", path, again)
    if r.returncode != 0:
        check(False, f"{what}: resave: {r.stderr.strip()}")
        return None
    return keras.saving.load_model(again)


def lockstep_predict(cli, model, x, out_dir, tag):
    xin, out = os.path.join(out_dir, f"{tag}_x.npy"), os.path.join(out_dir, f"{tag}_pred.npy")
    np.save(xin, x.astype(np.float32))
    r = run(cli, "predict", "--model", model, "--input", xin, "--output", out)
    if r.returncode != 0:
        check(False, f"lockstep predict {model}: exit {r.returncode}: {r.stderr.strip()}")
        return None
    return np.load(out)


def both_ways(model, x, d, cli, driver, what, rtol=RTOL):
    """Keras' file predicts the same in lockstep, and lockstep's re-save in Keras; the re-saved
    model (None when the re-save failed)."""
    want = model.predict(x, verbose=0)
    path = os.path.join(d, f"{model.name}.keras")
    model.save(path)
    got = lockstep_predict(cli, path, x, d, model.name)
    if got is not None:
        e = rel(got, want)
        check(got.shape == want.shape and e <= rtol, f"{what}: lockstep predicts Keras' outputs (rel {e:.2e})")
    again = os.path.join(d, f"{model.name}_resaved.keras")
    r = run(driver, "resave", path, again)
    if r.returncode != 0:
        check(False, f"{what}: resave: {r.stderr.strip()}")
        return None
    back = keras.saving.load_model(again)
    e = rel(back.predict(x, verbose=0), want)
    check(e <= rtol, f"{what}: lockstep's re-save loads in Keras and predicts the same (rel {e:.2e})")
    return back


def keras_models():
    keras.utils.set_random_seed(3)
    convnet = keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            keras.layers.Rescaling(1.0 / 255, offset=-0.1),
            keras.layers.ZeroPadding2D(((1, 0), (0, 1))),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.BatchNormalization(momentum=0.8),
            keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=4, dilation_rate=2),
            keras.layers.MaxPooling2D(),
            keras.layers.AveragePooling2D(2, strides=1, padding="same"),
            # 32 -> 64 channels, 3x3, stride 1: lockstep's Winograd convolution where the CPU has it
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(6, 2, strides=2, padding="same", activation="tanh", use_bias=False),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(4, activation="softmax"),
        ],
        name="keras_convnet",
    )
    mlp = keras.Sequential(
        [
            keras.Input((5, 4)),
            keras.layers.Flatten(),
            keras.layers.Dense(32, activation="gelu", kernel_initializer="he_normal"),
            keras.layers.BatchNormalization(epsilon=1e-2, center=False),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(16),
            keras.layers.Activation("sigmoid"),
            keras.layers.Reshape((4, 4)),
            keras.layers.Flatten(),
            keras.layers.Dense(4, activation="softmax"),
        ],
        name="keras_mlp",
    )
    inp = keras.Input((6, 6, 2))
    y = keras.layers.Conv2D(2, 3, padding="same", use_bias=False)(inp)
    y = keras.layers.Activation("relu")(keras.layers.BatchNormalization(momentum=0.8)(y))
    x = keras.layers.Add()([inp, y])
    x = keras.layers.Conv2D(4, 1, strides=2)(x)
    shortcut = keras.layers.BatchNormalization()(x)
    x = keras.layers.Add()([shortcut, keras.layers.Conv2D(4, 3, padding="same")(shortcut)])
    out = keras.layers.Dense(4, activation="softmax")(keras.layers.GlobalAveragePooling2D()(x))
    residual = keras.Model(inp, out, name="keras_residual")
    seq = keras.Input((6, 8))
    att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3, dropout=0.1)(seq, seq)
    out = keras.layers.Dense(4, activation="softmax")(keras.layers.Flatten()(att))
    attention = keras.Model(seq, out, name="keras_attention")
    return [convnet, mlp, residual, attention]


def part_a(d, cli, driver):
    rng = np.random.RandomState(0)
    for model in keras_models():
        shape = model.input_shape[1:]
        scale = 255.0 if model.name == "keras_convnet" else 1.0
        x = (rng.rand(48, *shape) * scale).astype(np.float32)
        y = rng.randint(0, 4, 48)
        model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x, y, epochs=2, batch_size=16, verbose=0)  # moves BatchNormalization's statistics
        path = os.path.join(d, f"{model.name}.keras")
        model.save(path)
        want = model.predict(x, verbose=0)
        got = lockstep_predict(cli, path, x, d, model.name)
        if got is not None:
            e = rel(got, want)
            check(got.shape == want.shape and e <= RTOL, f"(a) {model.name}: lockstep predicts Keras' outputs (rel {e:.2e})")
        # Keras' save_weights file, loaded into lockstep's copy of the model.
        weights = os.path.join(d, f"{model.name}.weights.h5")
        model.save_weights(weights)
        out = os.path.join(d, f"{model.name}_w_pred.npy")
        r = run(driver, "load-weights", path, weights, os.path.join(d, f"{model.name}_x.npy"), out)
        if r.returncode != 0:
            check(False, f"(a) {model.name}: load_weights: {r.stderr.strip()}")
        else:
            e = rel(np.load(out), want)
            check(e <= RTOL, f"(a) {model.name}: Keras' .weights.h5 loads in lockstep (rel {e:.2e})")
        # lockstep's re-save of Keras' file is a file Keras reads back as the same model.
        again = os.path.join(d, f"{model.name}_resaved.keras")
        back = resave_and_load(driver, path, again, f"(a) {model.name}")
        if back is None:
            continue
        e = rel(back.predict(x, verbose=0), want)
        check(e <= RTOL, f"(a) {model.name}: lockstep's re-save loads in Keras and predicts the same (rel {e:.2e})")
        check([l.__class__.__name__ for l in back.layers] == [l.__class__.__name__ for l in model.layers],
              f"(a) {model.name}: same layer classes after the re-save")


def part_d(d, driver):
    """(d) Keras' freezing: a Keras file whose Dense and BatchNormalization are frozen loads in
    lockstep with them frozen, and lockstep's re-save loads in Keras with them frozen."""
    keras.utils.set_random_seed(4)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu", name="base"),
            keras.layers.BatchNormalization(name="norm"),
            keras.layers.Dense(3, activation="softmax", name="head"),
        ],
        name="keras_frozen",
    )
    model.get_layer("base").trainable = False
    model.get_layer("norm").trainable = False
    path = os.path.join(d, "keras_frozen.keras")
    model.save(path)
    want = {layer.name: layer.trainable for layer in model.layers}
    r = run(driver, "trainable", path)
    got = {name: flag == "true" for name, flag in (line.split() for line in r.stdout.splitlines() if line.strip())}
    check(r.returncode == 0 and got == want,
          f"(d) Keras' frozen layers load frozen in lockstep: {got if r.returncode == 0 else r.stderr.strip()}")
    back = resave_and_load(driver, path, os.path.join(d, "keras_frozen_resaved.keras"), "(d) keras_frozen")
    if back is not None:
        check({layer.name: layer.trainable for layer in back.layers} == want,
              "(d) lockstep's re-save loads in Keras with the same layers frozen")


def part_b(d, cli, driver):
    rng = np.random.RandomState(1)
    for kind, shape in (("mlp", (6, 5)), ("cnn", (10, 10, 2)), ("resnet20", (8, 8, 3))):
        x = rng.rand(64, *shape).astype(np.float32)
        y = (x.reshape(64, -1).sum(axis=1) * 7).astype(np.int64) % 3
        np.save(os.path.join(d, f"b_{kind}_x.npy"), x)
        np.save(os.path.join(d, f"b_{kind}_y.npy"), y)
        path = os.path.join(d, f"lockstep_{kind}.keras")
        r = run(driver, "train", kind, path, os.path.join(d, f"b_{kind}_x.npy"), os.path.join(d, f"b_{kind}_y.npy"))
        if r.returncode != 0:
            check(False, f"(b) lockstep train {kind}: {r.stderr.strip()}")
            continue
        model = keras.saving.load_model(path)
        want = lockstep_predict(cli, path, x, d, f"b_{kind}")
        if want is None:
            continue
        got = model.predict(x, verbose=0)
        e = rel(got, want)
        # Keras against itself, the input moved by one float32 ulp or so: the model's own noise floor.
        jitter = np.random.RandomState(2).uniform(-1.2e-7, 1.2e-7, x.shape)
        floor = rel(model.predict((x * (1 + jitter)).astype(np.float32), verbose=0), got)
        tol = max(RTOL, 2 * floor)
        check(got.shape == want.shape and e <= tol,
              f"(b) lockstep_{kind}: Keras predicts lockstep's outputs (rel {e:.2e}; tolerance {tol:.1e}, "
              f"Keras' own change for a one-ulp input change {floor:.1e})")
        bn = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
        check(bool(bn) and float(np.max(np.abs(bn[0].moving_mean.numpy()))) > 0,
              f"(b) lockstep_{kind}: the trained moving statistics arrived")
        check(model.optimizer.__class__.__name__ == "Adam" and abs(float(model.optimizer.learning_rate) - 1e-2) < 1e-9
              and model.loss == "sparse_categorical_crossentropy",
              f"(b) lockstep_{kind}: compiled as lockstep compiled it (Adam 1e-2, sparse_categorical_crossentropy)")


def part_c(d, cli):
    conv3d = keras.Sequential([keras.Input((4, 4, 4, 1)), keras.layers.Conv3D(2, 2, name="my_conv3d"),
                               keras.layers.Flatten(), keras.layers.Dense(2)])
    path = os.path.join(d, "conv3d.keras")
    conv3d.save(path)
    r = run(cli, "predict", "--model", path, "--input", os.path.join(d, "keras_mlp_x.npy"))
    msg = r.stderr.strip()
    check(r.returncode == 1 and "conv3d.keras" in msg and "layer 'my_conv3d' (Conv3D)" in msg and "not supported" in msg,
          f"(c) a Conv3D layer: exit {r.returncode}, message: {msg}")
    a, b = keras.Input((4,)), keras.Input((4,))
    functional = keras.Model([a, b], keras.layers.Add()([keras.layers.Dense(3)(a), keras.layers.Dense(3)(b)]))
    path = os.path.join(d, "two_inputs.keras")
    functional.save(path)
    r = run(cli, "evaluate", "--model", path)
    msg = r.stderr.strip()
    check(r.returncode == 2 and "two_inputs.keras" in msg and "has 2 input(s)" in msg,
          f"(c) a Functional model of two inputs: exit {r.returncode}, message: {msg}")
    reg = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, kernel_regularizer="l2", name="reg")])
    path = os.path.join(d, "regularizer.keras")
    reg.save(path)
    r = run(cli, "evaluate", "--model", path)
    msg = r.stderr.strip()
    check(r.returncode == 1 and "layer 'reg' (Dense): argument kernel_regularizer=" in msg,
          f"(c) an argument lockstep lacks: exit {r.returncode}, message: {msg}")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    d, cli, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    part_a(d, cli, driver)
    part_b(d, cli, driver)
    part_c(d, cli)
    part_d(d, driver)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
