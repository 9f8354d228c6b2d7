"""Keras' functional API in Python: keras.Input, layers called on KerasTensors, keras.Model(inputs, outputs)."""
import numpy as np
import pytest

import lockstep as tf


def functional_mlp():
    inputs = tf.keras.Input(shape=(28, 28))
    x = tf.keras.layers.Flatten()(inputs)
    x = tf.keras.layers.Dense(64, activation="relu")(x)
    outputs = tf.keras.layers.Dense(10, activation="softmax")(x)
    return tf.keras.Model(inputs=inputs, outputs=outputs)


def test_functional_model_is_the_equivalent_sequential(mnist_small):
    (x, _), (x_test, _) = mnist_small
    tf.keras.utils.set_random_seed(3)
    functional = functional_mlp()
    tf.keras.utils.set_random_seed(3)
    sequential = tf.keras.Sequential([tf.keras.Input(shape=(28, 28)), tf.keras.layers.Flatten(),
                                      tf.keras.layers.Dense(64, activation="relu"),
                                      tf.keras.layers.Dense(10, activation="softmax")])
    assert functional.name == "functional" and functional.input_shape == (None, 28, 28)
    assert functional.output_shape == (None, 10) and functional.count_params() == sequential.count_params()
    assert [layer.name for layer in functional.layers] == ["input_layer", "flatten", "dense", "dense_1"]
    np.testing.assert_array_equal(functional.predict(x_test[:20]), sequential.predict(x_test[:20]))
    np.testing.assert_allclose(functional(x_test[:20]).numpy(), functional.predict(x_test[:20]), rtol=1e-6)


def test_functional_model_trains_under_mirrored_strategy_and_saves(tmp_path, mnist_small):
    (x, y), (x_test, y_test) = mnist_small
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model = functional_mlp()
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=2, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.85
    model.save(str(tmp_path / "functional.keras"))
    loaded = tf.keras.models.load_model(str(tmp_path / "functional.keras"))
    np.testing.assert_array_equal(loaded.predict(x_test[:50]), model.predict(x_test[:50]))


def test_a_merge_layer_takes_a_list():
    inputs = tf.keras.Input(shape=(8,))
    x = tf.keras.layers.Dense(16, activation="relu")(inputs)
    y = tf.keras.layers.Dense(16)(x)
    outputs = tf.keras.layers.Dense(1)(tf.keras.layers.Add()([x, y]))
    model = tf.keras.Model(inputs, outputs, name="residual")
    assert model.name == "residual" and model.output_shape == (None, 1)
    assert model.predict(np.ones((3, 8), dtype=np.float32)).shape == (3, 1)


def test_what_the_functional_api_refuses_is_named():
    inputs = tf.keras.Input(shape=(4,))
    outputs = tf.keras.layers.Dense(2)(inputs)
    with pytest.raises(ValueError, match=r"\(InputLayer\) is not used by any output"):
        tf.keras.Model([inputs, tf.keras.Input(shape=(4,))], outputs)
    with pytest.raises(ValueError, match="outputs must be KerasTensors"):
        tf.keras.Model(inputs, None)
    with pytest.raises(NotImplementedError, match="only on keras.Input's KerasTensors"):
        tf.keras.layers.Dense(2)(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="(?i)conv2d"):
        tf.keras.layers.Conv2D(4, 3)(inputs)
    other = tf.keras.Input(shape=(4,))
    with pytest.raises(ValueError):
        tf.keras.Model(inputs, tf.keras.layers.Dense(2)(other))  # outputs not computed from inputs
