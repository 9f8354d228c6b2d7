"""The rest of Keras 3's 1D convolution family from Python: Conv1DTranspose, SeparableConv1D, DepthwiseConv1D and
Cropping1D take Keras' positional arguments and defaults, have Keras' weights (names, shapes, order) and compute
what NumPy does in float64; a model of them and the remaining activations saves and loads as .keras."""
import numpy as np
import pytest

from lockstep import keras
from lockstep.keras import layers


def model_of(layer, x):
    inputs = keras.Input(x.shape[1:])
    return keras.Model(inputs, layer(inputs))


def set_random_weights(layer, seed):
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(-1, 1, w.shape).astype(np.float32) for w in layer.get_weights()]
    layer.set_weights(weights)
    return weights


def same_before(size, out, k, s, d=1):
    """TensorFlow's "same" padding before the steps, for a window over `size` giving `out` steps."""
    return max((out - 1) * s + (k - 1) * d + 1 - size, 0) // 2


def depthwise_numpy(x, kernel, strides, padding, dilation=1):
    """y[:, t, c * m + j] = sum_a x[:, t * s + a * d - before, c] * kernel[a, c, j]."""
    n, steps, ch = x.shape
    k, _, m = kernel.shape
    span = (k - 1) * dilation + 1
    out = (steps - span) // strides + 1 if padding == "valid" else -(-steps // strides)
    before = 0 if padding == "valid" else same_before(steps, out, k, strides, dilation)
    y = np.zeros((n, out, ch, m))
    for t in range(out):
        for a in range(k):
            src = t * strides + a * dilation - before
            if 0 <= src < steps:
                y[:, t] += x[:, src, :, None] * kernel[a]
    return y.reshape(n, out, ch * m)


@pytest.mark.parametrize("args,kwargs,strides,padding,output_padding", [
    ((3, 3), {}, 1, "valid", None),
    ((2, 3, 2, "same"), {}, 2, "same", None),
    ((2, 2, 3), {"output_padding": 2}, 3, "valid", 2),
    ((4, 3, 2, "same", 1), {"use_bias": False}, 2, "same", 1),
])
def test_conv1d_transpose_takes_keras_arguments_and_computes_what_numpy_does(args, kwargs, strides, padding,
                                                                             output_padding):
    conv = layers.Conv1DTranspose(*args, **kwargs)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    model = model_of(conv, x)
    weights = set_random_weights(conv, 1)
    kernel, bias = weights[0], (weights[1] if len(weights) > 1 else 0)
    k, filters = args[1], args[0]
    assert kernel.shape == (k, filters, 3)  # Keras' (kernel_size, filters, in_channels)
    assert [w.name.split("/")[-1] for w in conv.weights] == ["kernel", "bias"][:len(weights)]
    steps = x.shape[1]
    if padding == "valid":
        out = (steps - 1) * strides + k + (max(k, strides) - k if output_padding is None else output_padding)
    else:
        out = steps * strides if output_padding is None else (steps - 1) * strides + k % 2 + output_padding
    before = 0 if padding == "valid" else max((steps - 1) * strides + k - out, 0) // 2
    full = np.zeros((2, (steps - 1) * strides + k + before + out, filters))
    for i in range(steps):
        for a in range(k):
            full[:, i * strides + a] += x[:, i] @ kernel[a].T
    want = full[:, before:before + out] + bias
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)


def test_depthwise_and_separable_conv1d_compute_what_numpy_does():
    x = np.random.default_rng(2).uniform(-1, 1, (2, 7, 3)).astype(np.float32)
    depthwise = layers.DepthwiseConv1D(3, 2, "same", 2)  # kernel_size, strides, padding, depth_multiplier
    model = model_of(depthwise, x)
    kernel, bias = set_random_weights(depthwise, 3)
    assert kernel.shape == (3, 3, 2) and bias.shape == (6,)
    np.testing.assert_allclose(model.predict(x, verbose=0), depthwise_numpy(x, kernel, 2, "same") + bias, rtol=1e-5,
                               atol=1e-5)
    # filters, kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier
    separable = layers.SeparableConv1D(4, 2, 1, "valid", None, 2, 3, activation="tanh")
    model = model_of(separable, x)
    dk, pk, bias = set_random_weights(separable, 4)
    assert [w.name.split("/")[-1] for w in separable.weights] == ["depthwise_kernel", "pointwise_kernel", "bias"]
    assert (dk.shape, pk.shape, bias.shape) == ((2, 3, 3), (1, 9, 4), (4,))
    want = np.tanh(depthwise_numpy(x, dk, 1, "valid", dilation=2) @ pk[0] + bias)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)


def test_cropping1d_takes_an_int_or_a_pair_and_keras_default():
    x = np.arange(2 * 6 * 2, dtype=np.float32).reshape(2, 6, 2)
    np.testing.assert_array_equal(model_of(layers.Cropping1D(), x).predict(x, verbose=0), x[:, 1:5])
    np.testing.assert_array_equal(model_of(layers.Cropping1D((2, 0)), x).predict(x, verbose=0), x[:, 2:])
    np.testing.assert_array_equal(model_of(layers.Cropping1D(2), x).predict(x, verbose=0), x[:, 2:4])
    assert layers.Cropping1D((2, 0)).get_config()["cropping"] == [2, 0]


@pytest.mark.parametrize("make, message", [
    (lambda: layers.Conv1DTranspose(2, 3, padding="causal"), "causal"),
    (lambda: layers.DepthwiseConv1D(3, data_format="channels_first"), "channels_last"),
    (lambda: layers.SeparableConv1D(2, 3, depthwise_regularizer="l2"), "depthwise_regularizer"),
    (lambda: layers.Conv1DTranspose(2, 3, strides=2, output_padding=2), "less than strides"),
    (lambda: layers.Dense(2, activation="sparsemax"), "sparsemax"),
])
def test_what_lockstep_cannot_take_is_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_model_of_them_and_the_remaining_activations_round_trips_and_learns(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(48, 8, 2)).astype(np.float32)
    y = (x[:, :, 0].sum(axis=1) > 0).astype(np.float32)[:, None]
    model = keras.Sequential([
        keras.Input(shape=(8, 2)), layers.Conv1D(4, 3, strides=2, padding="same", activation="celu"),
        layers.Conv1DTranspose(4, 3, strides=2, padding="same", activation="squareplus"),
        layers.Cropping1D((1, 1)), layers.SeparableConv1D(4, 3, padding="same", activation="tanh_shrink"),
        layers.DepthwiseConv1D(2, activation="soft_shrink"), layers.Flatten(),
        layers.Dense(8, activation="log_sigmoid"), layers.Dense(8, activation="hard_tanh"),
        layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    history = model.fit(x, y, epochs=8, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    path = str(tmp_path / "conv1d_family.keras")
    model.save(path)
    again = keras.models.load_model(path)
    # (the loaded model lists its InputLayer first)
    assert [layer.get_config() for layer in again.layers][-len(model.layers):] == [
        layer.get_config() for layer in model.layers]
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))
