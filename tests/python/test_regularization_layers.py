"""Keras 3's other regularization layers (SpatialDropout1D / 2D / 3D, GaussianNoise, GaussianDropout, AlphaDropout,
Identity) and GroupNormalization / UnitNormalization from Python: Keras' positional arguments and defaults, the
identity in predict and their noise under training=True, the normalisations as NumPy computes them in float64,
Keras' refusals, and a model of them saved as .keras and loaded with the same predictions."""
import numpy as np
import pytest

from lockstep import keras
from lockstep.keras import layers


def predict(layer, x, **call_kwargs):
    inputs = keras.Input(x.shape[1:])
    return keras.Model(inputs, layer(inputs, **call_kwargs)).predict(x, verbose=0)


def test_regularization_layers_are_the_identity_in_predict_and_draw_under_training_true():
    x = np.random.default_rng(0).uniform(-1, 1, (64, 4, 3, 8)).astype(np.float32)
    for layer in (layers.SpatialDropout2D(0.5), layers.GaussianNoise(0.3), layers.GaussianDropout(0.4),
                  layers.AlphaDropout(0.3), layers.Identity()):
        np.testing.assert_array_equal(predict(layer, x), x, err_msg=type(layer).__name__)
    # training=True: whole feature maps dropped (one value per example and channel), the rest scaled.
    y = predict(layers.SpatialDropout2D(0.5), x, training=True)
    kept = (y != 0).all(axis=(1, 2))
    assert ((y == 0).all(axis=(1, 2)) | kept).all()
    assert 0.35 < kept.mean() < 0.65
    np.testing.assert_allclose(y, np.where(kept[:, None, None, :], 2 * x, 0), rtol=1e-6)
    noise = predict(layers.GaussianNoise(0.5), x, training=True) - x
    assert abs(noise.mean()) < 0.03 and abs(noise.std() - 0.5) < 0.03
    # SpatialDropout3D: whole volumes, one value per example and channel, either data format.
    volumes = x.reshape(64, 2, 2, 3, 8)
    np.testing.assert_array_equal(predict(layers.SpatialDropout3D(0.5), volumes), volumes)
    for data_format, axes in (("channels_last", (1, 2, 3)), ("channels_first", (2, 3, 4))):
        v = volumes if data_format == "channels_last" else volumes.transpose(0, 4, 1, 2, 3)
        y = predict(layers.SpatialDropout3D(0.5, data_format), v, training=True)
        assert ((y == 0).all(axis=axes) | (y != 0).all(axis=axes)).all(), data_format
        assert 0.35 < (y != 0).all(axis=axes).mean() < 0.65, data_format
    seq = x.reshape(64, 12, 8)
    y = predict(layers.SpatialDropout1D(0.5), seq, training=True)
    assert ((y == 0).all(axis=1) | (y != 0).all(axis=1)).all()


def test_group_and_unit_normalization_compute_what_numpy_does():
    x = np.random.default_rng(1).normal(0, 2, (3, 5, 6)).astype(np.float64)
    groups = x.reshape(3, 5, 2, 3)
    mean = groups.mean(axis=(1, 3), keepdims=True)
    var = groups.var(axis=(1, 3), keepdims=True)
    want = ((groups - mean) / np.sqrt(var + 1e-3)).reshape(x.shape)
    np.testing.assert_allclose(predict(layers.GroupNormalization(2), x.astype(np.float32)), want, rtol=1e-4, atol=1e-5)
    norm = layers.GroupNormalization(groups=-1, epsilon=0.1, center=False)
    per_channel = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 0.1)
    np.testing.assert_allclose(predict(norm, x.astype(np.float32)), per_channel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(predict(layers.UnitNormalization(), x.astype(np.float32)),
                               x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predict(layers.UnitNormalization(axis=[1, 2]), x.astype(np.float32)),
                               x / np.sqrt((x ** 2).sum(axis=(1, 2), keepdims=True)), rtol=1e-5, atol=1e-6)


def test_keras_refusals_by_name():
    inputs = keras.Input((5, 4))
    with pytest.raises(ValueError, match=r"Number of groups \(3\) must be a multiple of the number of channels \(4\)"):
        keras.Model(inputs, layers.GroupNormalization(3)(inputs))
    with pytest.raises(ValueError, match="Expected a float value between 0 and 1"):
        layers.GaussianNoise(2.0)
    # Keras' seed is taken (the layer's own stream of draws) and kept; noise_shape too.
    assert layers.GaussianDropout(0.2, seed=42).get_config()["seed"] == 42
    assert layers.Dropout(0.2, (None, 1, 4), seed=3).get_config()["noise_shape"] == [None, 1, 4]
    with pytest.raises(ValueError, match="expected ndim=3"):
        keras.Model(keras.Input((4,)), layers.SpatialDropout1D(0.2)(keras.Input((4,))))


def test_a_model_of_them_trains_and_saves_as_keras(tmp_path):
    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (96, 6, 6, 4)).astype(np.float32)
    y = (x[:, :3].mean(axis=(1, 2, 3)) > x[:, 3:].mean(axis=(1, 2, 3))).astype(np.float32)
    inputs = keras.Input((6, 6, 4))
    h = layers.SpatialDropout2D(0.1)(inputs)
    h = layers.Conv2D(8, 3, activation="relu")(h)
    h = layers.GroupNormalization(4)(h)
    h = layers.GaussianNoise(0.05)(h)
    h = layers.Flatten()(h)
    h = layers.GaussianDropout(0.1)(layers.Dense(8, activation="selu")(h))
    h = layers.UnitNormalization()(layers.AlphaDropout(0.05)(h))
    model = keras.Model(inputs, layers.Dense(1, activation="sigmoid")(layers.Identity()(h)))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    history = model.fit(x, y, epochs=10, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0], history.history["loss"]
    path = str(tmp_path / "regularized.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [layer.get_config() for layer in loaded.layers] == [layer.get_config() for layer in model.layers]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
