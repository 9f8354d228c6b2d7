"""The decoder side from Python: Conv2DTranspose, UpSampling2D, UpSampling1D, Cropping2D and ZeroPadding1D take
Keras' positional arguments and defaults and compute what NumPy does in float64 (the transposed convolution as
each input pixel scattering kernel * value into the output), and keras.io's denoising autoencoder saves and loads
as .keras and learns."""
import numpy as np
import pytest

from lockstep import keras
from lockstep.keras import layers


def predict(layer, x):
    inputs = keras.Input(x.shape[1:])
    return keras.Model(inputs, layer(inputs)).predict(x, verbose=0)


def conv2d_transpose_numpy(x, kernel, bias, strides, padding, output_padding=None):
    """tf.nn.conv2d_transpose with Keras' output size: scatter, then TensorFlow's "same" crop."""
    kh, kw, filters, _ = kernel.shape
    n, h, w, _ = x.shape
    sizes = []
    for i, (size, k, s) in enumerate(zip((h, w), (kh, kw), strides)):
        op = None if output_padding is None else output_padding[i]
        if padding == "valid":
            out = (size - 1) * s + k + (max(k, s) - k if op is None else op)
        else:
            out = size * s if op is None else (size - 1) * s + k % 2 + op
        before = 0 if padding == "valid" else max((size - 1) * s + k - out, 0) // 2
        sizes.append((out, before))
    (oh, top), (ow, left) = sizes
    full = np.zeros((n, (h - 1) * strides[0] + kh + top + oh, (w - 1) * strides[1] + kw + left + ow, filters))
    for i in range(h):
        for j in range(w):
            for a in range(kh):
                for b in range(kw):
                    full[:, i * strides[0] + a, j * strides[1] + b] += x[:, i, j] @ kernel[a, b].T
    return full[:, top:top + oh, left:left + ow] + bias


@pytest.mark.parametrize("args,kwargs,expect", [
    ((3, 3), {}, {}),
    ((2, 3, 2, "same"), {}, {"strides": (2, 2), "padding": "same"}),
    ((2, (2, 3), (3, 2)), {"output_padding": (1, 0)}, {"strides": (3, 2), "output_padding": (1, 0)}),
    ((4, 3, 2, "same", 1), {"use_bias": False}, {"strides": (2, 2), "padding": "same", "output_padding": (1, 1)}),
])
def test_conv2d_transpose_takes_keras_arguments_and_computes_what_numpy_does(args, kwargs, expect):
    conv = layers.Conv2DTranspose(*args, **kwargs)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4, 3, 3)).astype(np.float32)
    inputs = keras.Input(x.shape[1:])
    model = keras.Model(inputs, conv(inputs))
    rng = np.random.default_rng(1)
    weights = [rng.uniform(-1, 1, w.shape).astype(np.float32) for w in conv.get_weights()]
    conv.set_weights(weights)
    ksize = args[1] if isinstance(args[1], tuple) else (args[1], args[1])
    assert weights[0].shape == (*ksize, args[0], 3)  # Keras' (kh, kw, filters, in_channels)
    want = conv2d_transpose_numpy(x, weights[0], weights[1] if len(weights) > 1 else 0, expect.get("strides", (1, 1)),
                                  expect.get("padding", "valid"), expect.get("output_padding"))
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)


def test_upsampling_cropping_and_padding_compute_what_numpy_does():
    x = np.random.default_rng(2).uniform(-1, 1, (2, 3, 4, 2)).astype(np.float32)
    np.testing.assert_array_equal(predict(layers.UpSampling2D(), x), x.repeat(2, axis=1).repeat(2, axis=2))
    np.testing.assert_array_equal(predict(layers.UpSampling2D((3, 1)), x), x.repeat(3, axis=1))
    np.testing.assert_array_equal(predict(layers.Cropping2D(((1, 0), (1, 2))), x), x[:, 1:, 1:2])
    np.testing.assert_array_equal(predict(layers.Cropping2D(1), x), x[:, 1:2, 1:3])
    seq = x.reshape(2, 12, 2)
    np.testing.assert_array_equal(predict(layers.UpSampling1D(3), seq), seq.repeat(3, axis=1))
    np.testing.assert_array_equal(predict(layers.ZeroPadding1D((2, 1)), seq), np.pad(seq, ((0, 0), (2, 1), (0, 0))))
    np.testing.assert_array_equal(predict(layers.ZeroPadding1D(), seq), np.pad(seq, ((0, 0), (1, 1), (0, 0))))
    ramp = np.array([0, 1, 2, 3], np.float32).reshape(1, 2, 2, 1)
    np.testing.assert_allclose(predict(layers.UpSampling2D(interpolation="bilinear"), ramp)[0, 0, :, 0],
                               [0, 0.25, 0.75, 1])
    # Keras' other interpolations are ops.image.resize to size times the image, as Resizing's.
    np.testing.assert_allclose(predict(layers.UpSampling2D(interpolation="lanczos3"), x),
                               predict(layers.Resizing(6, 8, interpolation="lanczos3"), x), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="gaussian.*lanczos5"):
        layers.UpSampling2D(interpolation="gaussian")


def test_the_keras_denoising_autoencoder_learns_and_saves_as_keras(tmp_path):
    keras.utils.set_random_seed(5)
    rng = np.random.default_rng(3)
    clean = (rng.uniform(0, 1, (64, 1, 12, 1)) > 0.5).astype(np.float32).repeat(12, axis=1)  # vertical stripes
    noisy = np.clip(clean + rng.normal(0, 0.3, clean.shape), 0, 1).astype(np.float32)
    inputs = keras.Input((12, 12, 1))
    h = layers.Conv2D(8, 3, activation="relu", padding="same")(inputs)
    h = layers.MaxPooling2D((2, 2), padding="same")(h)
    h = layers.Conv2DTranspose(8, 3, strides=2, activation="relu", padding="same")(h)
    model = keras.Model(inputs, layers.Conv2D(1, 3, activation="sigmoid", padding="same")(h))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    history = model.fit(noisy, clean, epochs=20, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0], history.history["loss"]
    path = str(tmp_path / "autoencoder.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [layer.get_config() for layer in loaded.layers] == [layer.get_config() for layer in model.layers]
    np.testing.assert_array_equal(loaded.predict(noisy, verbose=0), model.predict(noisy, verbose=0))
