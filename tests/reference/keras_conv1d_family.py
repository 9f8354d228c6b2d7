#!/usr/bin/env python3
"""The rest of Keras 3's 1D convolution family and its remaining activations both ways against real Keras
(TF backend, .venv-ref).

usage: keras_conv1d_family.py DIR LOCKSTEP_CLI KERAS_FILES_DRIVER

Keras builds a Functional model of Conv1DTranspose (strides, "same" with output_padding, dilation, no bias),
Cropping1D (a pair and an int), SeparableConv1D and DepthwiseConv1D (every padding, strides, dilation, depth
multipliers) and a Dense branch for each of Keras 3's activations lockstep added (celu, hard_tanh, log_sigmoid,
hard_shrink, soft_shrink, tanh_shrink, squareplus, sparse_plus, sparse_sigmoid), with random weights, and saves it.
`lockstep predict` on that file gives Keras' predictions (relative 1e-4, each activation's branch by itself too);
Keras' save_weights file loads into lockstep's copy; lockstep's re-save loads back in Keras and predicts the same.
The same for a Sequential sequence autoencoder (Conv1D down, Conv1DTranspose up) Keras trained. Keras files with
what lockstep does not take (a regularizer, a sparsemax activation) are refused naming the argument.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, np, keras  # noqa: E402

RTOL = 1e-4
ACTIVATIONS = ("celu", "hard_tanh", "log_sigmoid", "hard_shrink", "soft_shrink", "tanh_shrink", "squareplus",
               "sparse_plus", "sparse_sigmoid")
BRANCH = 3  # each activation's Dense units


def randomize(model, seed):
    rng = np.random.RandomState(seed)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))


def keras_family_model():
    keras.utils.set_random_seed(21)
    L = keras.layers
    inp = keras.Input((10, 3))
    a = L.Cropping1D((2, 1))(L.Conv1DTranspose(4, 3, strides=2, activation="celu")(inp))  # 21 -> 18 steps
    b = L.Cropping1D(1)(L.Conv1DTranspose(4, 3, strides=2, padding="same", output_padding=1)(inp))  # 20 -> 18
    c = L.Conv1DTranspose(3, 3, padding="same", dilation_rate=2, use_bias=False, activation="squareplus")(inp)  # 10
    c = L.Cropping1D((0, 2))(L.UpSampling1D(2)(c))  # 18
    x = L.Concatenate()([a, b, c])
    x = L.SeparableConv1D(6, 3, padding="same", depth_multiplier=2, activation="tanh_shrink")(x)  # 18
    x = L.DepthwiseConv1D(3, strides=2, padding="same", depth_multiplier=2, activation="soft_shrink")(x)  # 9, 12
    x = L.SeparableConv1D(5, 2, strides=2, activation="hard_tanh")(x)  # 4
    y = L.DepthwiseConv1D(2, dilation_rate=2, use_bias=False, activation="sparse_plus")(x)  # 2
    z = L.SeparableConv1D(4, 3, padding="same", dilation_rate=2, activation="log_sigmoid")(x)  # 4
    w = L.DepthwiseConv1D(4, padding="valid")(x)  # 1
    flat = L.Concatenate()([L.Flatten()(y), L.Flatten()(z), L.Flatten()(w)])
    branches = [L.Dense(BRANCH, activation=name)(flat) for name in ACTIVATIONS]
    model = keras.Model(inp, L.Concatenate()(branches), name="keras_conv1d_family")
    randomize(model, 22)
    return model


def keras_sequence_autoencoder():
    """Conv1D down, Conv1DTranspose up, SeparableConv1D out: a few epochs of Keras' own training."""
    keras.utils.set_random_seed(23)
    L = keras.layers
    model = keras.Sequential([keras.Input((12, 2)), L.Conv1D(8, 3, strides=2, padding="same", activation="relu"),
                              L.Conv1DTranspose(8, 3, strides=2, padding="same", activation="relu"),
                              L.DepthwiseConv1D(3, padding="same", activation="tanh"),
                              L.SeparableConv1D(2, 3, padding="same")], name="keras_sequence_autoencoder")
    model.compile(optimizer="adam", loss="mse")
    t = np.arange(12, dtype=np.float32)
    x = np.stack([np.stack([np.sin(0.4 * t + p), np.cos(0.3 * t * (1 + p))], axis=-1) for p in np.linspace(0, 3, 64)])
    model.fit(x, x, epochs=3, batch_size=16, verbose=0)
    return model, x.astype(np.float32)


def refused(model, x, d, cli, what, needle):
    """A Keras file lockstep must refuse, naming `needle`."""
    path = os.path.join(d, f"{model.name}.keras")
    model.save(path)
    xin, out = os.path.join(d, f"{model.name}_x.npy"), os.path.join(d, f"{model.name}_pred.npy")
    np.save(xin, x.astype(np.float32))
    r = run(cli, "predict", "--model", path, "--input", xin, "--output", out)
    check(r.returncode != 0 and needle in r.stderr,
          f"{what}: refused naming {needle} (exit {r.returncode}: {r.stderr.strip()[:300]})")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    d, cli, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    model = keras_family_model()
    x = np.random.RandomState(24).normal(0, 1, (16, 10, 3)).astype(np.float32)
    want = model.predict(x, verbose=0)
    back = kf.both_ways(model, x, d, cli, driver, "Conv1DTranspose, Cropping1D, SeparableConv1D, DepthwiseConv1D", RTOL)
    if back is not None:
        check(sorted(l.__class__.__name__ for l in back.layers) == sorted(l.__class__.__name__ for l in model.layers),
              "the 1D family: same layer classes after the re-save")
    # Each activation's branch against Keras' by itself (its own scale).
    got = np.load(os.path.join(d, f"{model.name}_pred.npy")) if os.path.exists(
        os.path.join(d, f"{model.name}_pred.npy")) else None
    if got is not None:
        for i, name in enumerate(ACTIVATIONS):
            cols = slice(i * BRANCH, (i + 1) * BRANCH)
            e = rel(got[:, cols], want[:, cols])
            spread = float(np.ptp(want[:, cols]))
            check(e <= RTOL and spread > 0, f"activation {name}: lockstep predicts Keras' (rel {e:.2e}, range {spread:.2f})")
    # Keras' save_weights file, loaded into lockstep's copy of the model.
    weights = os.path.join(d, f"{model.name}.weights.h5")
    model.save_weights(weights)
    out = os.path.join(d, f"{model.name}_w_pred.npy")
    r = run(driver, "load-weights", os.path.join(d, f"{model.name}.keras"), weights,
            os.path.join(d, f"{model.name}_x.npy"), out)
    e = rel(np.load(out), want) if r.returncode == 0 else float("inf")
    failed = f": {r.stderr.strip()}" if r.returncode != 0 else ""
    check(e <= RTOL, f"the 1D family: Keras' .weights.h5 loads in lockstep (rel {e:.2e}){failed}")
    autoencoder, seq = keras_sequence_autoencoder()
    kf.both_ways(autoencoder, seq, d, cli, driver, "a sequence autoencoder Keras trained (Conv1DTranspose up)", RTOL)
    # What lockstep does not take, refused by name.
    L = keras.layers
    regularized = keras.Sequential([keras.Input((6, 2)), L.SeparableConv1D(2, 3, depthwise_regularizer="l2")],
                                   name="keras_regularized_separable1d")
    refused(regularized, x[:, :6, :2], d, cli, "SeparableConv1D(depthwise_regularizer='l2')", "depthwise_regularizer")
    sparsemax = keras.Sequential([keras.Input((4,)), L.Dense(3, activation="sparsemax")], name="keras_sparsemax")
    refused(sparsemax, x[:, 0, :2].repeat(2, axis=1), d, cli, "Dense(activation='sparsemax')", "sparsemax")
    print(f"{len(kf.failures)} failure(s)")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
