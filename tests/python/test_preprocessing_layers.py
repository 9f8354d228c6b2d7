"""Keras 3's preprocessing layers from Python: Normalization.adapt on NumPy arrays and lockstep
datasets gives NumPy's mean and variance and Keras' formula, and a model of Normalization and
RandomFlip in front of a small convnet trains with fit, leaves predict unflipped and saves as .keras."""
import numpy as np
import pytest

import lockstep
from lockstep import keras
from lockstep.keras import layers


def predict(layer, x):
    inputs = keras.Input(x.shape[1:])
    return keras.Model(inputs, layer(inputs)).predict(x, verbose=0)


def test_normalization_adapts_to_numpy_as_keras_docstring():
    data = np.array([[0., 7., 4.], [2., 9., 6.], [0., 7., 4.], [2., 9., 6.]], dtype="float32")
    norm = layers.Normalization(axis=-1)
    norm.adapt(data)
    mean, variance, count = norm.get_weights()
    np.testing.assert_allclose(mean, [1, 8, 5])
    np.testing.assert_allclose(variance, [1, 1, 1])
    assert count.shape == () and norm.trainable_weights == []
    np.testing.assert_allclose(predict(norm, data[:1]), [[-1, -1, -1]], atol=1e-6)
    inverted = layers.Normalization(axis=-1, invert=True)
    inverted.adapt(data)
    np.testing.assert_allclose(predict(inverted, np.array([[1., 2., 3.]], "float32")), [[2, 10, 8]], atol=1e-5)
    given = layers.Normalization(mean=3., variance=2.)
    np.testing.assert_allclose(predict(given, np.array([[1.], [2.], [3.]], "float32")),
                               [[-1.4142135], [-0.70710677], [0.]], atol=1e-6)


def test_normalization_adapts_to_a_dataset_batch_by_batch():
    x = np.random.default_rng(0).normal(5, 3, (50, 4)).astype("float32")
    norm = layers.Normalization()
    norm.adapt(lockstep.data.Dataset.from_tensor_slices((x, np.zeros(50, "float32"))).batch(8))
    mean, variance, _ = norm.get_weights()
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(variance, x.var(axis=0), rtol=1e-4)
    with pytest.raises(ValueError, match="numeric data only"):
        layers.Normalization().adapt(np.array([["a", "b"]]))


def test_a_model_with_normalization_and_random_flip_trains_and_saves(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 255, (64, 6, 6, 3)).astype("float32")
    labels = (images[:, :, :3].mean(axis=(1, 2, 3)) > images[:, :, 3:].mean(axis=(1, 2, 3))).astype("float32")
    norm = layers.Normalization()
    norm.adapt(images)
    inputs = keras.Input((6, 6, 3))
    x = layers.RandomFlip("horizontal", seed=1)(norm(inputs))
    x = layers.GlobalAveragePooling2D()(layers.Conv2D(4, 3, activation="relu")(x))
    model = keras.Model(inputs, layers.Dense(1, activation="sigmoid")(x))
    model.compile(optimizer="adam", loss="binary_crossentropy")
    before = norm.get_weights()
    history = model.fit(images, labels, batch_size=16, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    for a, b in zip(norm.get_weights(), before):  # fit leaves the adapted statistics alone
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(predict(layers.RandomFlip(), images), images)  # inference: the identity
    path = str(tmp_path / "augmented.keras")
    model.save(path)
    back = keras.models.load_model(path)
    np.testing.assert_array_equal(back.predict(images, verbose=0), model.predict(images, verbose=0))


def test_resizing_and_center_crop_take_keras_arguments():
    x = np.arange(2 * 4 * 6 * 1, dtype="float32").reshape(2, 4, 6, 1)
    # Nearest 4x6 -> 2x3: rows floor((i + 0.5) * 2) = 1, 3; columns 1, 3, 5.
    np.testing.assert_array_equal(predict(layers.Resizing(2, 3, "nearest"), x), x[:, 1::2, 1::2])
    # Bilinear halving: each output the mean of a 2x2 block (s = 2i + 0.5).
    blocks = (x[:, 0::2, 0::2] + x[:, 0::2, 1::2] + x[:, 1::2, 0::2] + x[:, 1::2, 1::2]) / 4
    np.testing.assert_allclose(predict(layers.Resizing(2, 3), x), blocks, rtol=1e-6)
    np.testing.assert_array_equal(predict(layers.CenterCrop(2, 2), x), x[:, 1:3, 2:4])
    # antialias widens a shrink's kernel (tf.image.resize's): the triangle reaches a third input.
    smooth = predict(layers.Resizing(2, 3, antialias=True), x)
    assert smooth.shape == blocks.shape and not np.allclose(smooth, blocks)
    # pad_to_aspect_ratio: 4x6 to the ratio 3 is 4x12, 3 columns of fill_value each side.
    padded = predict(layers.Resizing(4, 12, "nearest", pad_to_aspect_ratio=True, fill_value=-1.0), x)
    np.testing.assert_array_equal(padded[:, :, 3:9], x)
    assert (padded[:, :, :3] == -1).all() and (padded[:, :, 9:] == -1).all()
    with pytest.raises(ValueError, match="only one of"):
        layers.Resizing(2, 3, crop_to_aspect_ratio=True, pad_to_aspect_ratio=True)


def test_random_contrast_and_brightness_take_keras_arguments_and_scale_each_image_once():
    x = np.random.default_rng(2).uniform(0.3, 0.7, (64, 4, 5, 3)).astype("float32")
    contrast = layers.RandomContrast(0.5, value_range=(-10, 10), seed=3)
    brightness = layers.RandomBrightness((-0.2, 0.1), value_range=(1, 0))
    for layer in (contrast, brightness):  # inference: the identity
        np.testing.assert_array_equal(predict(layer, x), x, err_msg=type(layer).__name__)
    assert list(contrast.get_config()["factor"]) == [0, 0.5]  # Keras 3's (0, f): factors in [1, 1 + f]
    assert list(brightness.get_config()["value_range"]) == [0, 1]  # sorted as Keras sorts it
    # training=True: each image one contrast factor about its channels' means, within [1, 1.5].
    inputs = keras.Input(x.shape[1:])
    y = keras.Model(inputs, layers.RandomContrast(0.5, value_range=(-10, 10))(inputs, training=True)).predict(
        x, verbose=0)
    mean = x.mean(axis=(1, 2), keepdims=True)
    factor = ((y - mean) * (x - mean)).sum(axis=(1, 2, 3)) / ((x - mean) ** 2).sum(axis=(1, 2, 3))
    np.testing.assert_allclose(y, mean + factor[:, None, None, None] * (x - mean), atol=1e-5)
    assert (factor > 1 - 1e-4).all() and (factor < 1.5 + 1e-4).all() and factor.std() > 0.05
    # Brightness: one delta per image in [-0.2, 0.1] times the range's width, clipped to it.
    y = keras.Model(inputs, layers.RandomBrightness((-0.2, 0.1), value_range=(0, 1))(inputs, training=True)).predict(
        x, verbose=0)
    delta = (y - x).reshape(64, -1)
    np.testing.assert_allclose(delta, delta[:, :1].repeat(delta.shape[1], axis=1), atol=1e-6)
    assert (delta >= -0.2 - 1e-6).all() and (delta <= 0.1 + 1e-6).all()
    with pytest.raises(ValueError, match="in the range"):
        layers.RandomContrast(1.5)


def test_random_translation_rotation_and_zoom_take_keras_arguments_and_transform_in_training_only():
    x = np.random.default_rng(4).uniform(0, 1, (16, 6, 5, 3)).astype("float32")
    made = [layers.RandomTranslation(0.2, (-0.1, 0.3), seed=5), layers.RandomRotation(0.1, fill_mode="constant"),
            layers.RandomZoom(0.2), layers.RandomZoom((-0.3, 0.1), 0.2, interpolation="nearest")]
    for layer in made:  # inference: the identity
        np.testing.assert_array_equal(predict(layer, x), x, err_msg=type(layer).__name__)
    config = made[0].get_config()
    assert config["seed"] == 5 and config["fill_mode"] == "reflect" and config["interpolation"] == "bilinear"
    assert made[2].get_config()["width_factor"] is None
    assert list(layers.RandomRotation((0.3, -0.2)).get_config()["factor"]) == pytest.approx([-0.2, 0.3])
    # training=True: a quarter turn of every image (factor (0.25, 0.25)), nearest: the image turned.
    inputs = keras.Input((4, 4, 1))
    square = np.arange(32, dtype="float32").reshape(2, 4, 4, 1)
    turned = keras.Model(inputs, layers.RandomRotation((0.25, 0.25), interpolation="nearest")(inputs, training=True))
    np.testing.assert_array_equal(turned.predict(square, verbose=0), np.rot90(square, k=1, axes=(1, 2)))
    with pytest.raises(ValueError, match="in the range"):
        layers.RandomTranslation(1.5, 0.1)
    with pytest.raises(ValueError, match="Unknown `fill_mode` mirror"):
        layers.RandomZoom(0.1, fill_mode="mirror")


def test_random_crop_takes_keras_arguments_crops_one_window_in_training_and_the_centre_in_predict():
    x = np.arange(4 * 6 * 7 * 1, dtype="float32").reshape(4, 6, 7, 1)
    crop = layers.RandomCrop(3, 4, seed=7)
    config = crop.get_config()
    assert (config["height"], config["width"], config["seed"]) == (3, 4, 7)
    assert layers.RandomCrop(3, 4).get_config()["seed"] is None
    # predict: Keras' documented centre crop of the target's aspect ratio, resized; here 6x7 to the
    # ratio 3:4 is the centre 5x7 (rows 0-4), bilinear to 3x4.
    assert predict(layers.RandomCrop(3, 4), x).shape == (4, 3, 4, 1)
    np.testing.assert_array_equal(predict(layers.RandomCrop(6, 7), x), x)
    # training=True: one (3, 4) window of the input at the same offset for every image.
    inputs = keras.Input(x.shape[1:])
    y = keras.Model(inputs, crop(inputs, training=True)).predict(x, verbose=0)
    windows = [(h, w) for h in range(4) for w in range(4) if np.array_equal(y, x[:, h:h + 3, w:w + 4])]
    assert len(windows) == 1
    with pytest.raises(ValueError, match="`seed` must be an integer"):
        layers.RandomCrop(3, 4, seed=0.5)
    with pytest.raises(ValueError, match="integers or None"):
        layers.Dropout(0.5, noise_shape=(None, 1.5, 4))
